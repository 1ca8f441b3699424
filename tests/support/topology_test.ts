import assert from "node:assert/strict";
import { queueKeys } from "@users-pipeline/queue";
import { StandaloneRedis } from "./topology.ts";

Deno.test({
  name: "StandaloneRedis points the services at its server and heals a frozen or killed one",
  // ioredis keeps its reconnect timers past the test's end; close() stops them.
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  const redis = await StandaloneRedis.start();
  try {
    assert.deepEqual(redis.env(), { REDIS_URL: `redis://127.0.0.1:${redis.port}` });
    assert.deepEqual(redis.shards("q", 1), [queueKeys("q")], "one shard: the plain keys");
    assert.equal(redis.shards("q", 3).length, 3);
    await redis.client.set("kept", "1");
    redis.server.freeze();
    await redis.heal();
    assert.equal(await redis.client.get("kept"), "1", "thawed");
    redis.server.kill("SIGKILL");
    await redis.server.exited;
    await redis.heal();
    assert.equal(await redis.client.get("kept"), "1", "restarted from its AOF");
  } finally {
    await redis.close();
  }
});
