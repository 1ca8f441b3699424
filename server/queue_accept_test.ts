import assert from "node:assert/strict";
import type { UserEnvelope } from "@users-pipeline/queue";
import { type AcceptingQueue, queueAccept } from "./queue_accept.ts";

const CONFIG = { QUEUE_MAX_LENGTH: 10, IDEMPOTENCY_TTL_SECONDS: 60, REDIS_TIMEOUT_MS: 750 };

const user = (id: string): UserEnvelope => ({ id, name: `user ${id}`, enqueued_at: 0 });

/** A queue of two shards recording every call; ids ending in "1" belong to shard 1. */
function fakeQueue() {
  const pushed: { shard: number; maxLength: number; ids: string[] }[] = [];
  const once: { id: string; options: unknown }[] = [];
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
  };
  return { queue, pushed, once };
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
