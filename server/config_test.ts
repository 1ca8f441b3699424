import assert from "node:assert/strict";
import { loadServerConfig } from "./config.ts";

Deno.test("loadServerConfig() waits for no replica by default", () => {
  const config = loadServerConfig({});
  assert.equal(config.REDIS_WAIT_REPLICAS, 0);
  assert.equal(config.REDIS_CLUSTER_NODES, "");
  assert.equal(config.QUEUE_SHARDS, 1);
});

Deno.test("loadServerConfig() refuses a WAIT timeout longer than half of REDIS_TIMEOUT_MS", () => {
  const env = { REDIS_WAIT_REPLICAS: "1", REDIS_TIMEOUT_MS: "1000" };
  assert.equal(
    loadServerConfig({ ...env, REDIS_WAIT_TIMEOUT_MS: "500" }).REDIS_WAIT_TIMEOUT_MS,
    500,
  );
  assert.throws(
    () => loadServerConfig({ ...env, REDIS_WAIT_TIMEOUT_MS: "501" }),
    /^TypeError: Cannot start server: REDIS_WAIT_TIMEOUT_MS must be at most half of REDIS_TIMEOUT_MS \(500\): current value is "501"$/,
  );
  // Not waiting, the timeout is unused and not checked.
  assert.equal(loadServerConfig({ REDIS_WAIT_TIMEOUT_MS: "900" }).REDIS_WAIT_REPLICAS, 0);
});
