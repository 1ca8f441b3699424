/**
 * The sharded queue (QUEUE_SHARDS) and the replicated push (REDIS_WAIT_REPLICAS)
 * against real redis-servers: shards with hash-tagged keys on one standalone
 * Redis (the same keys and scripts a Redis Cluster runs; the cluster itself is
 * tests/cluster_*_test.ts), and a master with a replica for WAIT.
 */

import { RECOVER } from "@users-pipeline/queue/scripts";
import { runScript } from "@users-pipeline/queue/lua_script";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { rotatingWait } from "@users-pipeline/consumer/blocking_wait";
import {
  DeadLetters,
  FencedError,
  type FetchedBatch,
  queueShards,
  readOverview,
  readQueueStats,
  ShardedQueue,
  type UserEnvelope,
  WriteUnconfirmedError,
} from "@users-pipeline/queue";
import { depthOf, enqueueAll } from "@users-pipeline/harness/queue_fill";
import { ShardedPushes } from "@users-pipeline/server/grouped_pushes";
import { Consumer } from "@users-pipeline/consumer/consumer";
import { startRedis } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";

/** A batch's data, without its methods, to compare with `deepEqual`. */
const fields = ({ items, fromRetry, shard, suspectWaiting }: FetchedBatch) => ({
  items,
  fromRetry,
  shard,
  suspectWaiting,
});

let counter = 0;
/** Users with random (v4) ids, which spread over the shards as the API's do. */
function users(n: number, enqueuedAt = 1_000): UserEnvelope[] {
  return Array.from({ length: n }, (_, i) => ({
    id: crypto.randomUUID(),
    name: `user ${++counter} ${i}`,
    enqueued_at: enqueuedAt,
  }));
}

async function pushAll(queue: ShardedQueue, list: readonly UserEnvelope[]): Promise<void> {
  const pushes = new ShardedPushes(queue.pushes, {
    maxLength: 1_000_000,
    shardOf: (id) => queue.shardIndexOf(id),
  });
  await Promise.all(list.map((user) => pushes.enqueue(user)));
}

Deno.test("ShardedQueue: each user in its id's shard, a consumer serving every shard in turn", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq1", { shards: 3 }) });
    const list = users(30);
    await pushAll(queue, list);
    for (const user of list) {
      const shard = queue.keys[queue.shardIndexOf(user.id)]!;
      assert.equal(await redis.sismember(shard.queuedIds, user.id), 1, "indexed in its shard");
      assert.equal(await queue.indexed(user.id), "queued");
    }
    await queue.register("c1", 60_000);
    const seen: number[] = [];
    const stored = new Set<string>();
    for (;;) {
      const batch = await queue.fetch({ consumerId: "c1", max: 4 });
      if (batch.items.length === 0) break;
      seen.push(batch.shard ?? 0);
      const ids = batch.items.map((item) => JSON.parse(item).id as string);
      for (const id of ids) assert.equal(queue.shardIndexOf(id), batch.shard, "from its shard");
      ids.forEach((id) => stored.add(id));
      await batch.ack({ storedIds: ids });
    }
    assert.equal(stored.size, 30);
    // Every fetch starts one shard further: the first three batches come from three shards.
    assert.deepEqual(new Set(seen.slice(0, 3)), new Set([0, 1, 2]));
    assert.deepEqual(await depthOf(redis, queue.keys), {
      queued: 0,
      retry: 0,
      dead: 0,
      processing: 0,
    });
    for (const user of list) assert.equal(await queue.indexed(user.id), undefined);
    const overview = await readOverview(redis, { keys: queue.keys });
    assert.equal(overview.stored_total, 30);
    assert.deepEqual(overview.consumers.map((c) => [c.id, c.stored, c.alive]), [["c1", 30, true]]);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue: no shard starves a consumer that finds work in another", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq2", { shards: 4 }) });
    // A deep backlog in every shard; batches of 1 so each fetch takes one item.
    await pushAll(queue, users(200));
    await queue.register("c1", 60_000);
    const perShard = [0, 0, 0, 0];
    for (let i = 0; i < 40; i++) {
      const batch = await queue.fetch({ consumerId: "c1", max: 1 });
      assert.ok(batch.items.length === 1);
      perShard[batch.shard ?? 0]!++;
      await batch.ack();
    }
    assert.deepEqual(perShard, [10, 10, 10, 10]);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue: a dead consumer's items come back in every shard; fencing in one shard fences it", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq3", { shards: 3 }) });
    await pushAll(queue, users(30));
    await queue.register("dead", 60_000);
    await queue.register("alive", 60_000);
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await queue.fetch({ consumerId: "dead", max: 2 }));
    assert.deepEqual(new Set(held.map((b) => b?.shard)), new Set([0, 1, 2]));
    // It dies: its heartbeats expire in every shard.
    for (const keys of queue.keys) await redis.del(keys.heartbeatPrefix + "dead");
    const { recovered, consumers } = await queue.recover(3);
    assert.equal(recovered, 6);
    assert.equal(consumers, 1);
    const overview = await readOverview(redis, { keys: queue.keys });
    assert.equal(overview.depth.retry, 6);
    assert.deepEqual(overview.consumers.map((c) => c.id), ["alive"]);
    // The live consumer is not touched; its fetches take the recovered items one at a time first.
    const first = await queue.fetch({ consumerId: "alive", max: 10 });
    assert.ok(first.fromRetry);
    await first.ack();
    // The dead one is fenced everywhere it looks, its heartbeat too; the live one's beats.
    await assert.rejects(queue.fetch({ consumerId: "dead", max: 10 }), FencedError);
    await assert.rejects(queue.heartbeat("dead", 60_000), FencedError);
    await queue.heartbeat("alive", 60_000);
    // Fenced in one shard only, a consumer's fetch says so once it reaches that shard.
    await redis.srem(queue.keys[2]!.consumers, "alive");
    let fenced = false;
    for (let i = 0; i < 3 && !fenced; i++) {
      fenced = await queue.fetch({ consumerId: "alive", max: 1 }).then(
        () => false,
        (error) => error instanceof FencedError,
      );
    }
    assert.ok(fenced);
    await assert.rejects(queue.heartbeat("alive", 60_000), FencedError);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue: a recovery leaves alone a consumer registered after it read the members", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const [keys] = queueShards("sq4", { shards: 2 });
    const shard = new ShardedQueue(redis, { keys: [keys!] });
    await enqueueAll(shard, users(2, 10));
    await shard.register("late", 60_000);
    await shard.fetch({ consumerId: "late", max: 10 });
    // Its heartbeat is gone but it was not among the members given to the script: untouched.
    await redis.del(keys!.heartbeatPrefix + "late");
    const script = await runScript(redis, {
      script: RECOVER,
      keys: {
        consumers: keys!.consumers,
        retry: keys!.retry,
        dead: keys!.dead,
        deliveries: keys!.deliveries,
        queuedIds: keys!.queuedIds,
        deadIds: keys!.deadIds,
        deadCounts: keys!.deadCounts,
        stats: keys!.stats,
      },
      args: { maxCrashes: 3, now: new Date().toISOString() },
      restKeys: [],
      restArgs: [],
    });
    assert.deepEqual(script, [0, 0, 0]);
    assert.equal(await redis.llen(keys!.processingPrefix + "late"), 2);
    // A member given whose heartbeat is alive is not recovered either.
    await shard.register("late", 60_000);
    assert.deepEqual(await shard.recover(3), { recovered: 0, buried: 0, consumers: 0 });
  } finally {
    redis.disconnect();
  }
});

Deno.test("DeadLetters over shards: counts add up, pages merge newest first, requeue goes home", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq5", { shards: 3 }) });
    const list = users(9);
    await pushAll(queue, list);
    await queue.register("c", 60_000);
    let minute = 10;
    for (;;) {
      const batch = await queue.fetch({ consumerId: "c", max: 100 });
      if (batch.items.length === 0) break;
      const letters = batch.items.map((payload) => {
        const { id } = JSON.parse(payload);
        return {
          payload,
          id,
          reason: "refused",
          kind: "database_refused" as const,
          dead_at: `2026-01-01T00:${minute++}:00.000Z`,
        };
      });
      await batch.ack({ deadLetters: letters });
    }
    const dead = new DeadLetters(redis, queue.keys);
    const page = await dead.list(0, 4);
    assert.equal(page.total, 9);
    assert.deepEqual(page.byReason, { database_refused: 9 });
    const times = page.letters.map((letter) => (letter as { dead_at: string }).dead_at);
    assert.deepEqual(times, [...times].sort().reverse());
    assert.equal(times[0], `2026-01-01T00:${minute - 1}:00.000Z`, "the newest of all shards");
    const second = await dead.list(4, 4);
    assert.ok(second.letters.every((l) => (l as { dead_at: string }).dead_at < times[3]!));
    // Requeue one user by id: back in its own shard's list.
    const [one] = list;
    assert.equal(await dead.requeue({ ids: [one!.id] }), 1);
    const home = queue.keys[queue.shardIndexOf(one!.id)]!;
    assert.equal(await redis.llen(home.queue), 1);
    assert.equal(await queue.indexed(one!.id), "queued");
    assert.equal(await dead.purge({}), 8);
    const stats = await readQueueStats(redis, { keys: queue.keys, now: 61_000 });
    assert.deepEqual(stats.depth, { queued: 1, retry: 0, processing: 0, dead: 0 });
    assert.equal(stats.oldestAgeSeconds.queued, 60);
  } finally {
    redis.disconnect();
  }
});

Deno.test("Consumer over a ShardedQueue stores every user of every shard, waking on any shard", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const blocking = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq6", { shards: 3 }) });
    const stored = new Map<string, string>();
    const consumer = new Consumer({
      queue,
      waitForItems: rotatingWait(blocking, queue.keys.map((k) => k.queue)),
      store: {
        insert: (list) => {
          let inserted = 0;
          for (const user of list) {
            if (!stored.has(user.id)) {
              stored.set(user.id, user.name);
              inserted++;
            }
          }
          return Promise.resolve(inserted);
        },
        storedNames: (ids) =>
          Promise.resolve(
            new Map(ids.flatMap((id) => stored.has(id) ? [[id, stored.get(id)!]] : [])),
          ),
      },
      batchSize: 7,
      heartbeatTtlMs: 5_000,
      recoveryIntervalMs: 1_000,
      maxCrashes: 3,
      blockTimeoutSeconds: 1,
      retryMaxDelayMs: 100,
      shutdownTimeoutMs: 2_000,
      newId: () => crypto.randomUUID(),
    });
    const running = consumer.consume();
    const list = users(100);
    await pushAll(queue, list);
    await waitFor("every user stored", () => stored.size === 100, { timeoutMs: 10_000 });
    // Idle now; a user pushed to any one shard is still taken within the shard's wait.
    const [late] = users(1);
    await pushAll(queue, [late!]);
    await waitFor("the late user stored", () => stored.has(late!.id), { timeoutMs: 3_000 });
    await consumer.stop();
    await running;
    assert.deepEqual(await depthOf(redis, queue.keys), {
      queued: 0,
      retry: 0,
      dead: 0,
      processing: 0,
    });
  } finally {
    redis.disconnect();
    blocking.disconnect();
  }
});

Deno.test("ShardedQueue with waitReplicas: confirmed by a replica, or unconfirmed and kept", async () => {
  await using master = await startRedis();
  await using replica = await startRedis();
  const redis = new Redis(master.url);
  const replicaClient = new Redis(replica.url);
  try {
    await replicaClient.replicaof("127.0.0.1", master.port);
    await waitFor(
      "the replica in sync",
      async () => (await replicaClient.info("replication")).includes("master_link_status:up"),
      { timeoutMs: 10_000 },
    );
    const [keys] = queueShards("sq7", { cluster: true });
    const one = new ShardedQueue(redis, { keys: [keys!], waitReplicas: 1, waitTimeoutMs: 1_000 });
    const [confirmed] = users(1);
    assert.equal(await one.pushes[0]!.enqueueFitting([confirmed!], { maxLength: 10 }), 1);
    // Confirmed: the replica holds it the moment the push resolves.
    assert.equal(await replicaClient.llen(keys!.queue), 1);

    // Asking for two replicas of a master that has one: unconfirmed, but pushed.
    const two = new ShardedQueue(redis, { keys: [keys!], waitReplicas: 2, waitTimeoutMs: 50 });
    const [unconfirmed] = users(1);
    await assert.rejects(
      two.pushes[0]!.enqueueFitting([unconfirmed!], { maxLength: 10 }),
      (error: unknown) => {
        assert.ok(error instanceof WriteUnconfirmedError);
        assert.equal(error.pushed, 1);
        assert.match(error.message, /^Cannot confirm the push on 2 replicas: 1 acknowledged/);
        return true;
      },
    );
    assert.equal(await redis.llen(keys!.queue), 2, "unconfirmed is not lost");
    // Nothing pushed (the queue is full): no confirmation needed, no error.
    assert.equal(await two.pushes[0]!.enqueueFitting(users(1), { maxLength: 2 }), 0);

    // A fetch waits for no replica, whatever the queue asks of pushes.
    await two.register("c", 60_000);
    const batch = await two.fetch({ consumerId: "c", max: 10 });
    assert.deepEqual(
      batch?.items.map((item) => JSON.parse(item).id),
      [confirmed!.id, unconfirmed!.id],
    );
    assert.equal(await replicaClient.llen(keys!.processingPrefix + "c"), 2);
  } finally {
    redis.disconnect();
    replicaClient.disconnect();
  }
});

Deno.test("ShardedQueue: a batch fetched while one is held; a suspect in another shard waits for a fetch holding nothing", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const queue = new ShardedQueue(redis, { keys: queueShards("sq8", { shards: 3 }) });
    await pushAll(queue, users(60));
    await queue.register("c", 60_000);
    const first = await queue.fetch({ consumerId: "c", max: 5, held: 0 });
    assert.equal(first?.items.length, 5);
    // The early fetch, holding the first batch: the next shard's batch, beside it.
    const second = await queue.fetch({ consumerId: "c", max: 5, held: 5 });
    assert.equal(second?.items.length, 5);
    assert.notEqual(second?.shard, first?.shard);
    const processing = (batch: typeof first) =>
      redis.llen(queue.keys[batch!.shard!]!.processingPrefix + "c");
    assert.equal(await processing(first), 5);
    assert.equal(await processing(second), 5);
    await first.ack();
    // A recovered item waits in the shard where the next fetch starts (one further each
    // time: a fetch that finds items earlier returns them, so within 3 fetches one starts
    // there), and that shard's main list has items too.
    const suspectShard = (second!.shard! + 1) % 3;
    await redis.lpush(queue.keys[suspectShard]!.retry, "suspect");
    // Holding the second batch, no shard hands over the suspect: nothing, and the next fetch starts there.
    assert.deepEqual(fields(await queue.fetch({ consumerId: "c", max: 5, held: 5 })), {
      items: [],
      fromRetry: false,
      shard: suspectShard,
      suspectWaiting: true,
    });
    await second.ack();
    assert.deepEqual(fields(await queue.fetch({ consumerId: "c", max: 5, held: 0 })), {
      items: ["suspect"],
      fromRetry: true,
      shard: suspectShard,
      suspectWaiting: false,
    });
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue batches: the next batch in the acknowledgement's call with one shard; with several, only the acknowledgement, and a fetch of its own", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    for (const shards of [1, 3]) {
      const queue = new ShardedQueue(redis, { keys: queueShards(`af${shards}`, { shards }) });
      await pushAll(queue, users(30));
      await queue.register("c1", 60_000);
      const batch = await queue.fetch({ consumerId: "c1", max: 4 });
      const ids = batch.items.map((item) => JSON.parse(item).id as string);
      if (shards === 1) {
        assert.equal(queue.fetchesWithAck, true);
        const next = await batch.ackAndFetch({ storedIds: ids }, { max: 4 });
        assert.equal(next.items.length, 4);
        assert.equal(next.shard, 0);
      } else {
        // The next batch may be another shard's: the consumer acknowledges alone
        // and its fetch takes the next batch in turn.
        assert.equal(queue.fetchesWithAck, false);
        await batch.ack({ storedIds: ids });
      }
      assert.equal((await depthOf(redis, queue.keys)).processing, shards === 1 ? 4 : 0);
      assert.equal((await readOverview(redis, { keys: queue.keys })).stored_total, 4);
      if (shards > 1) {
        // Asked for the next batch all the same, it fetches in turn: the next shard's.
        const again = await queue.fetch({ consumerId: "c1", max: 4 });
        const next = await again.ackAndFetch({}, { max: 4 });
        assert.equal(next.items.length, 4);
        assert.equal(next.shard, (again.shard! + 1) % shards);
      }
    }
  } finally {
    redis.disconnect();
  }
});
