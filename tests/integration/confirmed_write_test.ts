/**
 * Confirmed pushes (REDIS_WAIT_REPLICAS, `queue/confirmed_write.ts`) against a real Redis that has
 * no replica, as a promoted master left without one has: every `WAIT` lasts its whole timeout.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { parseInfo } from "@users-pipeline/harness/redis_cluster";
import { startRedis } from "@users-pipeline/harness/services";
import { queueKeys, queueShards, ShardedQueue, WriteUnconfirmedError } from "@users-pipeline/queue";
import { ANSWER_MARGIN_MS } from "../support/service_env.ts";
import { REDIS_TICK_MS } from "../support/topology.ts";

const WAIT_TIMEOUT_MS = 200;

/** A call's outcome and how long it took from `startedAt`. */
function timed(call: Promise<unknown>, startedAt: number): Promise<{ error: unknown; ms: number }> {
  return call.then(
    () => ({ error: undefined, ms: Date.now() - startedAt }),
    (error: unknown) => ({ error, ms: Date.now() - startedAt }),
  );
}

function assertWithin(settled: readonly { ms: number }[], boundMs: number): void {
  const slowest = Math.max(...settled.map(({ ms }) => ms));
  assert.ok(slowest <= boundMs, `the slowest refusal took ${slowest} ms, over ${boundMs} ms`);
}

/** Redis ran two WAITs in all: one for the first push, one for every push that came meanwhile. */
async function assertTwoWaits(redis: Redis): Promise<void> {
  const stats = parseInfo(await redis.info("commandstats"));
  const waits = Number(/calls=(\d+)/.exec(stats.get("cmdstat_wait") ?? "")?.[1]);
  assert.equal(
    waits,
    2,
    "one WAIT for the first push, one for all that came while it was in flight",
  );
}

Deno.test("ShardedQueue refuses concurrent pushes a master without replicas cannot confirm within two WAIT timeouts each, one WAIT in flight at a time", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("confirmed");
    const queue = new ShardedQueue(redis, {
      keys: [keys],
      waitReplicas: 1,
      waitTimeoutMs: WAIT_TIMEOUT_MS,
    });
    const user = (i: number) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-${String(i).padStart(12, "0")}`,
      name: `user-${i}`,
      enqueued_at: 1,
    });
    // Grouped pushes and keyed ones, all on the one connection, as in the API.
    const calls = Array.from({ length: 20 }, (_, i) => {
      const startedAt = Date.now();
      const call = i % 2 === 0
        ? queue.pushes[0]!.enqueueFitting([user(i)], { maxLength: 100 })
        : queue.enqueueOnce(user(i), { key: `key-${i}`, maxLength: 100, ttlSeconds: 60 });
      return timed(call, startedAt);
    });
    const settled = await Promise.all(calls);
    for (const { error } of settled) {
      assert.ok(error instanceof WriteUnconfirmedError, `unconfirmed, not ${error}`);
      assert.equal(error.pushed, 1, "the push ran; only its confirmation is missing");
    }
    // The WAIT in flight when a push arrived, then its own, each ending up to a Redis tick late,
    // and the client's event loop on a loaded machine; WAITs queued behind one another would take
    // 20 of them for the last push.
    assertWithin(settled, 2 * (WAIT_TIMEOUT_MS + REDIS_TICK_MS) + ANSWER_MARGIN_MS);
    assert.equal(await redis.llen(keys.queue), 20, "every push ran once");
    await assertTwoWaits(redis);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue: shards on one master share its one WAIT in flight", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, {
      keys: queueShards("confirmed-shards", { shards: 2 }),
      waitReplicas: 1,
      waitTimeoutMs: WAIT_TIMEOUT_MS,
    });
    const calls = Array.from({ length: 20 }, (_, i) => {
      const startedAt = Date.now();
      const key = `key-${i}`;
      const user = { id: queue.idForKey(key), name: `user-${i}`, enqueued_at: 1 };
      const call = i % 2 === 0
        ? queue.pushes[queue.shardIndexOf(user.id)]!.enqueueFitting([user], { maxLength: 100 })
        : queue.enqueueOnce(user, { key, maxLength: 100, ttlSeconds: 60 });
      return timed(call, startedAt);
    });
    const settled = await Promise.all(calls);
    for (const { error } of settled) {
      assert.ok(error instanceof WriteUnconfirmedError, `unconfirmed, not ${error}`);
    }
    // One WAIT per shard would put two on the one connection at a time, and a push behind both.
    assertWithin(settled, 2 * (WAIT_TIMEOUT_MS + REDIS_TICK_MS) + ANSWER_MARGIN_MS);
    await assertTwoWaits(redis);
  } finally {
    redis.disconnect();
  }
});
