import assert from "node:assert/strict";
import calculateSlot from "cluster-key-slot";
import { HASH_SLOTS, queueKeys, queueShards, shardOf, shardTag } from "./keys.ts";

Deno.test("queueShards() keeps today's untagged names for one shard on a standalone Redis", () => {
  assert.deepEqual(queueShards("users"), [queueKeys("users")]);
  assert.deepEqual(queueShards("users", { shards: 1 })[0], {
    queue: "users",
    retry: "users:retry",
    dead: "users:dead",
    consumers: "users:consumers",
    deliveries: "users:deliveries",
    processingPrefix: "users:processing:",
    heartbeatPrefix: "users:heartbeat:",
    queuedIds: "users:queued",
    deadIds: "users:dead:ids",
    deadCounts: "users:dead:counts",
    stats: "users:stats",
    idempotencyPrefix: "users:idempotency:",
  });
});

Deno.test("queueShards() tags every key of a shard into the slot of its bare main list", () => {
  for (const options of [{ cluster: true }, { shards: 6 }, { shards: 6, cluster: true }]) {
    for (const keys of queueShards("users", options)) {
      const slot = calculateSlot(keys.queue);
      for (const [name, key] of Object.entries(keys)) {
        const full = name.endsWith("Prefix") ? key + "consumer-1" : key;
        assert.equal(calculateSlot(full), slot, `${name}: ${full}`);
      }
      assert.ok(!keys.queue.includes("{"), "the main list keeps a bare name");
    }
  }
  const [single] = queueShards("users", { cluster: true });
  assert.equal(single?.queue, "users", "the course's LPUSH users feeds the queue in a cluster");
  assert.equal(single?.retry, "{users}:retry");
});

Deno.test("queueShards() puts shard s's slot in the s-th of K equal slot ranges", () => {
  for (const shards of [2, 3, 6, 16, 1024]) {
    const keys = queueShards("users", { shards });
    assert.equal(keys.length, shards);
    assert.equal(new Set(keys.map((k) => k.queue)).size, shards, "distinct tags");
    keys.forEach((k, s) => {
      const slot = calculateSlot(k.queue);
      assert.ok(slot >= Math.floor(s * HASH_SLOTS / shards), `${shards}: shard ${s} slot ${slot}`);
      assert.ok(slot < Math.floor((s + 1) * HASH_SLOTS / shards), `${shards}: shard ${s}`);
    });
    // The shard whose range holds the bare name's slot is the bare name: raw LPUSHes feed it.
    assert.ok(keys.some((k) => k.queue === "users"), `${shards}: one shard is "users"`);
  }
});

Deno.test("shardTag() is the same in every process (API and consumers must agree)", () => {
  assert.equal(shardTag("users", { shard: 2, shards: 6 }), "users:2");
  assert.equal(shardTag("users", { shard: 0, shards: 6 }), "users:0.4");
  assert.equal(shardTag("users", { shard: 5, shards: 6 }), "users");
});

Deno.test("queueShards() refuses a shard count out of range", () => {
  assert.throws(() => queueShards("users", { shards: 0 }), RangeError);
  assert.throws(() => queueShards("users", { shards: 1.5 }), RangeError);
});

Deno.test("shardOf() spreads ids evenly and always puts one id in one shard", () => {
  const counts = [0, 0, 0, 0, 0, 0];
  for (let i = 0; i < 60_000; i++) {
    const id = crypto.randomUUID();
    const shard = shardOf(id, 6);
    assert.equal(shardOf(id, 6), shard);
    counts[shard]!++;
  }
  for (const n of counts) assert.ok(n > 9_000 && n < 11_000, `${counts}`);
  assert.equal(shardOf("anything", 1), 0);
});

Deno.test("shardOf() sends the API's ids (UUIDv7) of one millisecond to one shard, the next to the next", () => {
  const v7 = (ms: number, random: string) =>
    `${ms.toString(16).padStart(12, "0").replace(/^(.{8})/, "$1-")}-7${random}`;
  const ms = 1_795_334_319_381;
  const [a, b] = [v7(ms, "abc-8def-0123456789ab"), v7(ms, "123-9fed-ba9876543210")];
  assert.equal(shardOf(a, 6), shardOf(b, 6));
  assert.equal(shardOf(a, 6), ms % 6);
  assert.equal(shardOf(v7(ms + 1, "abc-8def-0123456789ab"), 6), (ms + 1) % 6);
  // Not a UUID (never the API's): hashed, still one shard per id.
  assert.equal(shardOf("not-a-uuid", 6), shardOf("not-a-uuid", 6));
});
