import assert from "node:assert/strict";
import { z } from "zod";
import { clusterNodes, intVar, parseEnv, processVars, queueVars } from "./config.ts";

Deno.test("parseEnv() fills every default for an empty environment", () => {
  const config = parseEnv({ ...queueVars, ...processVars }, { service: "test", env: {} });
  assert.deepEqual(config, {
    REDIS_URL: "redis://redis:6379",
    QUEUE_NAME: "users",
    REDIS_CLUSTER_NODES: "",
    QUEUE_SHARDS: 1,
    REPLICA_ID: "",
    PORT: 8000,
  });
  assert.ok(Object.isFrozen(config));
});

Deno.test("parseEnv() treats an empty value as unset", () => {
  assert.equal(
    parseEnv(queueVars, { service: "test", env: { QUEUE_NAME: "" } }).QUEUE_NAME,
    "users",
  );
});

Deno.test("parseEnv() names every bad variable with its value", () => {
  assert.throws(
    () =>
      parseEnv({ ...queueVars, N: intVar(1, 5) }, {
        service: "test",
        env: { QUEUE_SHARDS: "-3", N: "x" },
      }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /^Cannot start test: /);
      assert.match(error.message, /QUEUE_SHARDS .*: current value is "-3"/);
      assert.match(error.message, /N .*: current value is "x"/);
      return true;
    },
  );
});

Deno.test("parseEnv() rejects a value outside an enum", () => {
  assert.throws(
    () => parseEnv({ MODE: z.enum(["a", "b"]) }, { service: "test", env: { MODE: "c" } }),
    /MODE .*current value is "c"/,
  );
});

Deno.test("parseEnv() takes REDIS_CLUSTER_NODES as host:port pairs, clusterNodes() splits them", () => {
  const { REDIS_CLUSTER_NODES } = parseEnv(queueVars, {
    service: "test",
    env: {
      REDIS_CLUSTER_NODES: "redis-1:7000,10.0.0.2:7001",
    },
  });
  assert.deepEqual(clusterNodes(REDIS_CLUSTER_NODES), [
    { host: "redis-1", port: 7000 },
    { host: "10.0.0.2", port: 7001 },
  ]);
  assert.deepEqual(clusterNodes(""), []);
});

Deno.test("parseEnv() refuses a REDIS_CLUSTER_NODES that is not host:port pairs", () => {
  for (const bad of ["redis-1", "redis-1:7000,", "redis://a:1", "a:0", "a:70000", "a:1 b:2"]) {
    assert.throws(
      () => parseEnv(queueVars, { service: "test", env: { REDIS_CLUSTER_NODES: bad } }),
      new RegExp(`REDIS_CLUSTER_NODES must be comma-separated host:port pairs .*"${bad}"`),
      bad,
    );
  }
});

Deno.test("parseEnv() bounds QUEUE_SHARDS to 1-1024", () => {
  assert.equal(
    parseEnv(queueVars, { service: "test", env: { QUEUE_SHARDS: "1024" } }).QUEUE_SHARDS,
    1024,
  );
  for (const bad of ["0", "1025", "2.5"]) {
    assert.throws(
      () => parseEnv(queueVars, { service: "test", env: { QUEUE_SHARDS: bad } }),
      /QUEUE_SHARDS/,
    );
  }
});
