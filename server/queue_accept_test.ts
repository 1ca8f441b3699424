import assert from "node:assert/strict";
import type { UserEnvelope } from "@users-pipeline/queue";
import { type AcceptingQueue, queueAccept } from "./queue_accept.ts";

const CONFIG = {
  QUEUE_MAX_LENGTH: 10,
  IDEMPOTENCY_TTL_SECONDS: 60,
  REDIS_TIMEOUT_MS: 750,
  BATCH_MAX_ITEMS: 3,
  BATCH_BODY_LIMIT_BYTES: 4096,
};

const user = (id: string): UserEnvelope => ({ id, name: `user ${id}`, enqueued_at: 0 });

/** A queue of two shards recording every call; ids ending in "1" belong to shard 1. */
function fakeQueue() {
  const pushed: { shard: number; maxLength: number; ids: string[] }[] = [];
  const once: { id: string; options: unknown }[] = [];
  const batches: { ids: string[]; options: unknown }[] = [];
  const queue: AcceptingQueue = {
    pushes: [0, 1].map((shard) => ({
      enqueueFitting: (users: readonly UserEnvelope[], { maxLength }: { maxLength: number }) => {
        pushed.push({ shard, maxLength, ids: users.map((u) => u.id) });
        return Promise.resolve(users.length);
      },
    })),
    shardIndexOf: (id) => id.endsWith("1") ? 1 : 0,
    idForKey: (key) => `id-for-${key}`,
    enqueueOnce: (user, options) => {
      once.push({ id: user.id, options });
      return Promise.resolve(user.id);
    },
    enqueueBatch: (users, options) => {
      batches.push({ ids: users.map((u) => u.id), options });
      return Promise.resolve(users.map(() => undefined));
    },
    enqueueBatchOnce: (users, options) => {
      batches.push({ ids: users.map((u) => u.id), options });
      return Promise.resolve(users.map((u) => u.id));
    },
  };
  return { queue, pushed, once, batches };
}

Deno.test("queueAccept() groups the users of one turn per shard, each bounded by its share", async () => {
  const { queue, pushed } = fakeQueue();
  const { accept } = queueAccept(queue, CONFIG);
  await Promise.all(["a0", "b1", "c0"].map((id) => accept(user(id))));
  assert.deepEqual(pushed.toSorted((x, y) => x.shard - y.shard), [
    { shard: 0, maxLength: 5, ids: ["a0", "c0"] },
    { shard: 1, maxLength: 5, ids: ["b1"] },
  ]);
});

Deno.test("queueAccept() pushes a keyed user alone with its key, the whole bound and the key's lifetime", async () => {
  const { queue, pushed, once } = fakeQueue();
  const { acceptOnce } = queueAccept(queue, CONFIG);
  assert.equal(acceptOnce.newId("k"), "id-for-k");
  assert.equal(await acceptOnce.accept(user("d0"), "k"), "d0");
  assert.deepEqual(once, [{ id: "d0", options: { key: "k", maxLength: 10, ttlSeconds: 60 } }]);
  assert.deepEqual(pushed, []);
});

Deno.test("queueAccept() waits for a push at most REDIS_TIMEOUT_MS", () => {
  assert.equal(queueAccept(fakeQueue().queue, CONFIG).acceptTimeoutMs, 750);
});

Deno.test("queueAccept() pushes a batch by itself with the whole bound, the app's bound, and its key's lifetime when keyed", async () => {
  const { queue, pushed, batches } = fakeQueue();
  const { batch } = queueAccept(queue, CONFIG);
  const bound = <T>(work: Promise<T>) => work;
  assert.deepEqual(await batch.accept([user("a0"), user("b1")], bound), [undefined, undefined]);
  assert.deepEqual(await batch.acceptOnce([user("c0")], "k"), ["c0"]);
  assert.deepEqual(batches, [
    { ids: ["a0", "b1"], options: { maxLength: 10, bound } },
    { ids: ["c0"], options: { key: "k", maxLength: 10, ttlSeconds: 60 } },
  ]);
  assert.deepEqual(pushed, [], "not grouped with single users");
  assert.equal(batch.maxItems, 3);
  assert.equal(batch.bodyLimitBytes, 4096);
});
