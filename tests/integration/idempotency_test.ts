/**
 * `Idempotency-Key`'s record against a real Redis, through the queue the API
 * uses (`ShardedQueue.enqueueOnce`, the ENQUEUE_ONCE script): first seen,
 * seen again, another name, in flight, expired, full, too late; in the key's
 * shard with QUEUE_SHARDS > 1; and through a real API process. Prints what a
 * key's record costs in Redis memory, for the capacity model.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import {
  encodeEnvelope,
  IdempotencyConflictError,
  QueueFullError,
  queueShards,
  ShardedQueue,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { projectEnv, startPostgres, startRedis } from "@users-pipeline/harness/services";
import { waitForHttp } from "@users-pipeline/harness/wait";

const DAY = 86_400;

function userFor(queue: ShardedQueue, key: string, name: string): UserEnvelope {
  return { id: queue.idForKey(key), name, enqueued_at: Date.now() };
}

Deno.test("enqueueOnce() pushes a key's user once: seen again it answers the first id, another name is a conflict", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const queue = new ShardedQueue(redis, { keys: queueShards("idem-once") });
  const [keys] = queue.keys;
  try {
    const ada = userFor(queue, "key-1", "Ada");
    assert.equal(
      await queue.enqueueOnce(ada, { key: "key-1", maxLength: 100, ttlSeconds: DAY }),
      ada.id,
    );
    assert.deepEqual(await redis.lrange(keys!.queue, 0, -1), [encodeEnvelope(ada)]);
    assert.equal(await redis.sismember(keys!.queuedIds, ada.id), 1, "indexed like any push");

    // A retry mints a new id; the key answers the first one and nothing more is pushed.
    const retry = userFor(queue, "key-1", "Ada");
    assert.equal(
      await queue.enqueueOnce(retry, { key: "key-1", maxLength: 100, ttlSeconds: DAY }),
      ada.id,
    );
    assert.equal(await redis.llen(keys!.queue), 1);
    assert.equal(await redis.sismember(keys!.queuedIds, retry.id), 0);

    await assert.rejects(
      queue.enqueueOnce(userFor(queue, "key-1", "Grace"), {
        key: "key-1",
        maxLength: 100,
        ttlSeconds: DAY,
      }),
      (error) => error instanceof IdempotencyConflictError && error.id === ada.id,
    );
    assert.equal(await redis.llen(keys!.queue), 1, "nothing pushed for the conflict");

    // The record lives from the push: a repeat does not extend it.
    const ttl = await redis.ttl(keys!.idempotencyPrefix + "key-1");
    assert.ok(ttl > DAY - 5 && ttl <= DAY, `ttl ${ttl}`);

    // What one key's record costs in Redis memory (a 36-character key, as a client's UUID would be).
    const key = crypto.randomUUID();
    await queue.enqueueOnce(userFor(queue, key, "Lin"), { key, maxLength: 100, ttlSeconds: DAY });
    const bytes = await redis.memory("USAGE", keys!.idempotencyPrefix + key);
    console.log(`an Idempotency-Key's record (36-character key): ${bytes} bytes of Redis memory`);
  } finally {
    redis.disconnect();
  }
});

Deno.test("enqueueOnce() with one key from many clients at once pushes one user and answers every one its id", async () => {
  await using server = await startRedis();
  const clients = Array.from({ length: 8 }, () => new Redis(server.url));
  try {
    const queues = clients.map((redis) =>
      new ShardedQueue(redis, { keys: queueShards("idem-race") })
    );
    const ids = await Promise.all(
      queues.map((queue) =>
        queue.enqueueOnce(userFor(queue, "race", "Ada"), {
          key: "race",
          maxLength: 100,
          ttlSeconds: DAY,
        })
      ),
    );
    assert.equal(new Set(ids).size, 1, `one id for all: ${ids}`);
    assert.equal(await clients[0]!.llen("idem-race"), 1);
  } finally {
    for (const redis of clients) redis.disconnect();
  }
});

Deno.test("enqueueOnce() leaves no record when it pushed nothing (full, too late), and forgets a key once expired", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const queue = new ShardedQueue(redis, { keys: queueShards("idem-edges") });
  const late = new ShardedQueue(redis, { keys: queueShards("idem-edges"), enqueueWithinMs: 1 });
  const [keys] = queue.keys;
  try {
    await redis.lpush(keys!.queue, "x", "y");
    await assert.rejects(
      queue.enqueueOnce(userFor(queue, "full", "Ada"), {
        key: "full",
        maxLength: 2,
        ttlSeconds: DAY,
      }),
      QueueFullError,
    );
    assert.equal(
      await redis.exists(keys!.idempotencyPrefix + "full"),
      0,
      "a refused key stays new",
    );

    // Redis runs the push after its deadline (stopped when it was sent, resumed 100 ms later):
    // nothing is done, not even the record.
    server.server.freeze();
    const pending = late.enqueueOnce(userFor(late, "late", "Ada"), {
      key: "late",
      maxLength: 100,
      ttlSeconds: DAY,
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    server.server.thaw();
    await assert.rejects(pending, /ran the push too late/);
    assert.equal(await redis.exists(keys!.idempotencyPrefix + "late"), 0);

    const first = userFor(queue, "short", "Ada");
    await queue.enqueueOnce(first, { key: "short", maxLength: 100, ttlSeconds: 1 });
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    const after = userFor(queue, "short", "Ada");
    assert.equal(
      await queue.enqueueOnce(after, { key: "short", maxLength: 100, ttlSeconds: 1 }),
      after.id,
      "after its retention the key is new: a second user",
    );
    assert.equal(await redis.llen(keys!.queue), 4);
  } finally {
    redis.disconnect();
  }
});

Deno.test("enqueueOnce() with QUEUE_SHARDS=3 keeps a key's record and its user in the key's shard", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const queue = new ShardedQueue(redis, { keys: queueShards("idem-shards", { shards: 3 }) });
  try {
    const shardsUsed = new Set<number>();
    for (let i = 0; i < 30; i++) {
      const key = `client-${i}`;
      const user = userFor(queue, key, `User ${i}`);
      const shard = queue.shardIndexOfKey(key);
      shardsUsed.add(shard);
      assert.equal(queue.shardIndexOf(user.id), shard, `${user.id} minted in ${key}'s shard`);
      await queue.enqueueOnce(user, { key, maxLength: 300, ttlSeconds: DAY });
      const again = userFor(queue, key, `User ${i}`);
      assert.equal(
        await queue.enqueueOnce(again, { key, maxLength: 300, ttlSeconds: DAY }),
        user.id,
      );
      const keys = queue.keys[shard]!;
      assert.equal(await redis.exists(keys.idempotencyPrefix + key), 1);
      assert.equal(await redis.sismember(keys.queuedIds, user.id), 1);
      assert.equal(await queue.indexed(user.id), "queued", "GET /users/{id} finds it");
    }
    assert.deepEqual([...shardsUsed].sort(), [0, 1, 2], "keys spread over every shard");
    const lengths = await Promise.all(queue.keys.map((keys) => redis.llen(keys.queue)));
    assert.equal(lengths.reduce((a, b) => a + b), 30, `one push per key: ${lengths}`);
  } finally {
    redis.disconnect();
  }
});

Deno.test("the API with Idempotency-Key: the same 202 and id for a retry, 422 for another name, 400 for a malformed key", async () => {
  await using redisServer = await startRedis();
  await using pg = await startPostgres();
  const port = freePort();
  await using api = new TaskProcess("server", {
    ...projectEnv(),
    ...pg.env,
    REDIS_URL: redisServer.url,
    QUEUE_NAME: "idem-api",
    QUEUE_SHARDS: "3",
    PORT: String(port),
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/readyz`, { alive: () => api.running });
  const post = async (name: string, key?: string) => {
    const res = await fetch(`${url}/users`, {
      method: "POST",
      headers: key === undefined ? {} : { "Idempotency-Key": key },
      body: JSON.stringify({ name }),
    });
    return { res, body: await res.json() };
  };
  const first = await post("Ada", "api-key");
  assert.equal(first.res.status, 202);
  const again = await post("Ada", "api-key");
  assert.equal(again.res.status, 202);
  assert.equal(again.body.id, first.body.id);
  assert.equal(again.res.headers.get("Location"), `/users/${first.body.id}`);
  assert.equal(again.res.headers.get("Idempotent-Replayed"), "true");
  const status = await fetch(`${url}/users/${first.body.id}`);
  assert.deepEqual(await status.json(), { status: "queued", id: first.body.id });

  const reused = await post("Grace", "api-key");
  assert.equal(reused.res.status, 422);
  assert.equal(reused.body.code, "idempotency_key_reused");
  const malformed = await post("Grace", "has space");
  assert.equal(malformed.res.status, 400);
  assert.equal(malformed.body.code, "invalid_idempotency_key");
  const unkeyed = await post("Ada");
  assert.notEqual(unkeyed.body.id, first.body.id, "without a key, every request is a user");

  const redis = new Redis(redisServer.url);
  try {
    const queued = await Promise.all(
      queueShards("idem-api", { shards: 3 }).map((keys) => redis.llen(keys.queue)),
    );
    assert.equal(
      queued.reduce((a, b) => a + b),
      2,
      `Ada once for the key, once without: ${queued}`,
    );
  } finally {
    redis.disconnect();
  }
  const metrics = await (await fetch(`${url}/metrics`)).text();
  assert.match(
    metrics,
    /^users_pipeline_users_accepted_total\{[^}]*\} 2$/m,
    "a replay is no new user",
  );
});
