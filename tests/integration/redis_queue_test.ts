/**
 * The queue's scripts against a real Redis, for what the consumer's fakes
 * cannot show: what a script leaves behind in the keys it touches.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { type Batch, FencedError, queueKeys, ShardedQueue } from "@users-pipeline/queue";
import { enqueueAll } from "@users-pipeline/harness/queue_fill";
import { startRedis } from "@users-pipeline/harness/services";

/** A batch's data, without its methods, to compare with `deepEqual`. */
const fields = ({ items, fromRetry, suspectWaiting }: Batch & { suspectWaiting: boolean }) => ({
  items,
  fromRetry,
  suspectWaiting,
});

/** The field of an item in the crash counts (Redis' `sha1hex`). */
async function sha1(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test("ShardedQueue.handBack() clears the crash counts of the items it returns", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("handback");
    const queue = new ShardedQueue(redis, { keys: [keys] });
    const users = ["a", "b"].map((name, i) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-00000000000${i}`,
      name,
      enqueued_at: 1,
    }));
    await enqueueAll(queue, users, 10);
    // A consumer takes both and crashes: its heartbeat is gone.
    await queue.register("crashed", 60_000);
    await queue.fetch({ consumerId: "crashed", max: 10 });
    await redis.del(keys.heartbeatPrefix + "crashed");
    assert.deepEqual(await queue.recover(3), { recovered: 2, buried: 0, consumers: 1 });
    assert.equal(await redis.hlen(keys.deliveries), 2, "one crash counted against each");
    // Another takes one recovered item and stops gracefully before storing it.
    await queue.register("stopping", 60_000);
    const batch = await queue.fetch({ consumerId: "stopping", max: 10 });
    assert.ok(batch?.fromRetry);
    const [taken = ""] = batch.items;
    assert.equal(await queue.handBack("stopping"), 1);
    assert.equal(await redis.hget(keys.deliveries, await sha1(taken)), null);
    assert.equal(await redis.hlen(keys.deliveries), 1, "the item still waiting keeps its count");
    assert.deepEqual(await redis.lrange(keys.queue, 0, -1), [taken]);
    assert.equal(await redis.sismember(keys.consumers, "stopping"), 0);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardPushes.enqueueFitting() pushes the first users that fit, and nothing late", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("fitting");
    const queue = new ShardedQueue(redis, { keys: [keys], enqueueWithinMs: 500 });
    const users = [0, 1, 2, 3, 4].map((i) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-00000000001${i}`,
      name: `user ${i}`,
      enqueued_at: 1,
    }));
    await enqueueAll(queue, [users[0]!], 3);
    assert.equal(
      await queue.pushes[0]!.enqueueFitting(users.slice(1), { maxLength: 3 }),
      2,
      "two of four fit",
    );
    assert.deepEqual(
      (await redis.lrange(keys.queue, 0, -1)).map((item) => JSON.parse(item).name),
      ["user 2", "user 1", "user 0"],
      "pushed in arrival order, the newest at the left",
    );
    assert.deepEqual(
      (await redis.smembers(keys.queuedIds)).sort(),
      [0, 1, 2].map((i) => users[i]!.id),
    );
    assert.equal(
      await queue.pushes[0]!.enqueueFitting(users.slice(3), { maxLength: 3 }),
      0,
      "a full queue takes none",
    );
    // A group whose earliest request asked more than enqueueWithinMs ago does nothing.
    await redis.del(keys.queue, keys.queuedIds);
    await assert.rejects(
      queue.pushes[0]!.enqueueFitting(users, { maxLength: 10, since: Date.now() - 600 }),
      /too late/,
    );
    assert.equal(await redis.llen(keys.queue), 0);
    assert.equal(await redis.scard(keys.queuedIds), 0);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue.fetch() with a batch held: a new batch, the same one again after a lost reply, no suspect", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("early");
    const queue = new ShardedQueue(redis, { keys: [keys] });
    const users = [0, 1, 2, 3, 4, 5].map((i) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-00000000002${i}`,
      name: `user ${i}`,
      enqueued_at: 1,
    }));
    await enqueueAll(queue, users, 100);
    await queue.register("c", 60_000);
    const names = (batch: { readonly items: readonly string[] } | undefined) =>
      batch?.items.map((item) => JSON.parse(item).name);
    const first = await queue.fetch({ consumerId: "c", max: 2, held: 0 });
    assert.deepEqual(names(first), ["user 0", "user 1"]);
    const second = await queue.fetch({ consumerId: "c", max: 2, held: 2 });
    assert.deepEqual(names(second), ["user 2", "user 3"], "the next batch, beside the first");
    // The second fetch's reply was lost: repeating it returns the same items.
    assert.deepEqual(names(await queue.fetch({ consumerId: "c", max: 2, held: 2 })), [
      "user 2",
      "user 3",
    ]);
    // Acknowledging the first trims exactly the first, from the oldest end.
    await first.ack({ storedIds: users.slice(0, 2).map((u) => u.id) });
    assert.deepEqual(
      (await redis.lrange(keys.processingPrefix + "c", 0, -1)).map((i) => JSON.parse(i).name),
      ["user 3", "user 2"],
    );
    // A recovered item waits: a fetch holding a batch gets nothing, one holding nothing gets it.
    await redis.lpush(keys.retry, "suspect");
    assert.deepEqual(fields(await queue.fetch({ consumerId: "c", max: 2, held: 2 })), {
      items: [],
      fromRetry: false,
      suspectWaiting: true,
    });
    await second.ack({ storedIds: users.slice(2, 4).map((u) => u.id) });
    assert.deepEqual(fields(await queue.fetch({ consumerId: "c", max: 2, held: 0 })), {
      items: ["suspect"],
      fromRetry: true,
      suspectWaiting: false,
    });
    assert.equal(await redis.llen(keys.queue), 2, "users 4 and 5 still queued");
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue.ack() repeated after a lost reply trims nothing, even with the next batch held", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("repeat");
    const queue = new ShardedQueue(redis, { keys: [keys] });
    const users = [0, 1, 2, 3].map((i) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-00000000003${i}`,
      name: `user ${i}`,
      enqueued_at: 1,
    }));
    await enqueueAll(queue, users, 100);
    await queue.register("c", 60_000);
    const first = await queue.fetch({ consumerId: "c", max: 2, held: 0 });
    // The next batch, fetched while the first was stored.
    await queue.fetch({ consumerId: "c", max: 2, held: 2 });
    const letter = {
      payload: first.items[1]!,
      reason: "test",
      kind: "invalid_item" as const,
      dead_at: new Date(0).toISOString(),
    };
    await first.ack({ deadLetters: [letter], storedIds: [users[0]!.id] });
    // Its reply was lost and the consumer sends it again: the list now holds
    // only the next batch, whose oldest items the repeat must not trim.
    await first.ack({ deadLetters: [letter], storedIds: [users[0]!.id] });
    assert.deepEqual(
      (await redis.lrange(keys.processingPrefix + "c", 0, -1)).map((i) => JSON.parse(i).name),
      ["user 3", "user 2"],
    );
    assert.equal(await redis.llen(keys.dead), 1, "the letter is buried once");
    assert.equal(await redis.hget(keys.stats, "stored"), "1", "the stored row counted once");
  } finally {
    redis.disconnect();
  }
});

Deno.test("FetchedBatch.ackAndFetch() of ShardedQueue acknowledges and takes the next batch in one call; a repeat returns the same batch", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("ackfetch");
    const queue = new ShardedQueue(redis, { keys: [keys] });
    const users = [0, 1, 2, 3, 4, 5, 6].map((i) => ({
      id: `01934d5e-7b7c-7a1e-9c3f-00000000004${i}`,
      name: `user ${i}`,
      enqueued_at: 1,
    }));
    const extra = users.splice(4);
    await enqueueAll(queue, users, 100);
    await queue.register("c", 60_000);
    const names = (batch: { readonly items: readonly string[] } | undefined | null) =>
      batch?.items.map((item) => JSON.parse(item).name);
    const first = await queue.fetch({ consumerId: "c", max: 2, held: 0 });
    const stored = { storedIds: users.slice(0, 2).map((u) => u.id) };
    const second = await first.ackAndFetch(stored, { max: 2 });
    assert.deepEqual(names(second), ["user 2", "user 3"]);
    assert.deepEqual(
      (await redis.lrange(keys.processingPrefix + "c", 0, -1)).map((i) => JSON.parse(i).name),
      ["user 3", "user 2"],
      "the first batch acknowledged, the second held",
    );
    // The reply was lost: the repeat acknowledges nothing more and returns the same batch.
    const again = await first.ackAndFetch(stored, { max: 2 });
    assert.deepEqual(names(again), ["user 2", "user 3"]);
    assert.equal(await redis.hget(keys.stats, "stored"), "2");
    // Pipelined: the second is acknowledged while the third (user 4, fetched
    // during its insert) is held, and the fetch takes the one after it.
    await enqueueAll(queue, extra, 100);
    const third = await queue.fetch({ consumerId: "c", max: 2, held: 2 });
    assert.deepEqual(names(third), ["user 4", "user 5"]);
    const fourth = await second.ackAndFetch({}, { max: 2, held: 2 });
    assert.deepEqual(names(fourth), ["user 6"]);
    assert.deepEqual(
      (await redis.lrange(keys.processingPrefix + "c", 0, -1)).map((i) => JSON.parse(i).name),
      ["user 6", "user 5", "user 4"],
    );
    // Its reply was lost: the repeat acknowledges nothing more and returns the same batch.
    assert.deepEqual(names(await second.ackAndFetch({}, { max: 2, held: 2 })), ["user 6"]);
    // A recovered item waits: a consumer still holding a batch gets nothing...
    await redis.lpush(keys.retry, "suspect");
    assert.deepEqual(fields(await third.ackAndFetch({}, { max: 2, held: 1 })), {
      items: [],
      fromRetry: false,
      suspectWaiting: true,
    });
    // ...and one holding nothing once acknowledged takes it, alone.
    const suspect = await fourth.ackAndFetch({}, { max: 2 });
    assert.deepEqual(fields(suspect), {
      items: ["suspect"],
      fromRetry: true,
      suspectWaiting: false,
    });
    // Fenced: nothing acknowledged, nothing taken.
    await redis.srem(keys.consumers, "c");
    await assert.rejects(suspect.ackAndFetch({}, { max: 2 }), FencedError);
    assert.deepEqual(await redis.lrange(keys.processingPrefix + "c", 0, -1), ["suspect"]);
    assert.equal(await redis.llen(keys.queue), 0);
  } finally {
    redis.disconnect();
  }
});
