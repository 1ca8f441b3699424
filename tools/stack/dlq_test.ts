// The command itself, run against a real Redis with real dead letters: tests/integration/dead_letters_test.ts.
import assert from "node:assert/strict";
import { Cluster, Redis } from "ioredis";
import { parseDlqArgs, queueClient } from "./dlq.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

Deno.test("parseDlqArgs() reads list's page and the filters of requeue and purge", () => {
  assert.deepEqual(parseDlqArgs(["list", "--limit", "5"]), {
    action: "list",
    offset: 0,
    limit: 5,
    filter: {},
  });
  assert.deepEqual(parseDlqArgs(["requeue"]).filter, {});
  assert.deepEqual(
    parseDlqArgs(["requeue", "--reason", "database_refused", "--id", ID.toUpperCase(), "--id", ID])
      .filter,
    { reason: "database_refused", ids: [ID, ID] },
  );
  assert.deepEqual(parseDlqArgs(["purge", "--all"]).filter, {});
  assert.deepEqual(parseDlqArgs(["purge", "--reason", "invalid_item"]).filter, {
    reason: "invalid_item",
  });
});

Deno.test("parseDlqArgs() refuses a purge of everything without --all, and unknown input", () => {
  assert.throws(() => parseDlqArgs(["purge"]), /--all/);
  assert.throws(() => parseDlqArgs(["purge", "--all", "--reason", "invalid_item"]), /--all/);
  assert.throws(() => parseDlqArgs(["requeue", "--reason", "bad luck"]), /must be one of/);
  assert.throws(() => parseDlqArgs(["drop"]), /list, requeue or purge/);
  assert.throws(() => parseDlqArgs(["list", "--limit", "x"]), /--limit/);
  assert.throws(() => parseDlqArgs(["list", "--force"]), TypeError);
});

Deno.test("queueClient() reaches one untagged list on a standalone Redis by default", () => {
  const { redis, keys } = queueClient("redis://127.0.0.1:1", {
    env: {},
    redis: { lazyConnect: true },
  });
  assert.ok(redis instanceof Redis);
  assert.deepEqual(keys.map((shard) => [shard.queue, shard.retry]), [["users", "users:retry"]]);
});

Deno.test("queueClient() reaches every shard, through a Cluster client with REDIS_CLUSTER_NODES", () => {
  const { redis, keys } = queueClient("redis://unused:1", {
    env: { QUEUE_SHARDS: "3", REDIS_CLUSTER_NODES: "127.0.0.1:1,127.0.0.1:2", QUEUE_NAME: "q" },
    redis: { lazyConnect: true },
  });
  assert.ok(redis instanceof Cluster);
  assert.equal(keys.length, 3);
  for (const shard of keys) assert.equal(shard.retry, `{${shard.queue}}:retry`);
});

Deno.test("queueClient() logs in as the services do, with REDIS_USERNAME and REDIS_PASSWORD", () => {
  const env = { REDIS_USERNAME: "ops", REDIS_PASSWORD: "s3cret" };
  const { redis } = queueClient("redis://127.0.0.1:1", { env, redis: { lazyConnect: true } });
  assert.ok(redis instanceof Redis);
  assert.deepEqual([redis.options.username, redis.options.password], ["ops", "s3cret"]);
  const { redis: cluster } = queueClient("redis://unused:1", {
    env: { ...env, REDIS_CLUSTER_NODES: "127.0.0.1:1" },
    redis: { lazyConnect: true },
  });
  assert.ok(cluster instanceof Cluster);
  const { username, password } = cluster.options.redisOptions ?? {};
  assert.deepEqual([username, password], ["ops", "s3cret"]);
});

Deno.test("queueClient() names a bad variable", () => {
  assert.throws(
    () =>
      queueClient("redis://127.0.0.1:1", {
        env: { QUEUE_SHARDS: "0" },
        redis: { lazyConnect: true },
      }),
    /^TypeError: Cannot start dlq: QUEUE_SHARDS .*current value is "0"/,
  );
});
