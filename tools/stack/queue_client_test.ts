import assert from "node:assert/strict";
import { Cluster, Redis } from "ioredis";
import { queueClient } from "./queue_client.ts";

Deno.test("queueClient() reaches one untagged list on a standalone Redis by default", () => {
  const { redis, keys, cluster } = queueClient("test", {}, "redis://127.0.0.1:1", {
    lazyConnect: true,
  });
  assert.ok(redis instanceof Redis);
  assert.equal(cluster, false);
  assert.deepEqual(keys.map((shard) => [shard.queue, shard.retry]), [["users", "users:retry"]]);
});

Deno.test("queueClient() reaches every shard, through a Cluster client with REDIS_CLUSTER_NODES", () => {
  const { redis, keys, cluster } = queueClient(
    "test",
    { QUEUE_SHARDS: "3", REDIS_CLUSTER_NODES: "127.0.0.1:1,127.0.0.1:2", QUEUE_NAME: "q" },
    "redis://unused:1",
    { lazyConnect: true },
  );
  assert.ok(redis instanceof Cluster);
  assert.equal(cluster, true);
  assert.equal(keys.length, 3);
  for (const shard of keys) assert.equal(shard.retry, `{${shard.queue}}:retry`);
});

Deno.test("queueClient() names a bad variable", () => {
  assert.throws(
    () => queueClient("dlq", { QUEUE_SHARDS: "0" }, "redis://127.0.0.1:1", { lazyConnect: true }),
    /^TypeError: Cannot start dlq: QUEUE_SHARDS .*current value is "0"/,
  );
});
