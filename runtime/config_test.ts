import assert from "node:assert/strict";
import { z } from "zod";
import { clusterNodes, intVar, parseEnv, processVars, queueVars, redisTls } from "./config.ts";

Deno.test("parseEnv() fills every default for an empty environment", () => {
  const config = parseEnv({ ...queueVars, ...processVars }, { service: "test", env: {} });
  assert.deepEqual(config, {
    REDIS_URL: "redis://redis:6379",
    QUEUE_NAME: "users",
    REDIS_CLUSTER_NODES: "",
    QUEUE_SHARDS: 1,
    REDIS_USERNAME: "",
    REDIS_PASSWORD: "",
    REDIS_TLS_CA_FILE: undefined,
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

Deno.test("parseEnv() takes rediss:// cluster nodes as TLS, redisTls() says so in both modes", () => {
  const config = parseEnv(queueVars, {
    service: "test",
    env: { REDIS_CLUSTER_NODES: "rediss://redis-1:7000,rediss://10.0.0.2:7001" },
  });
  assert.deepEqual(clusterNodes(config.REDIS_CLUSTER_NODES), [
    { host: "redis-1", port: 7000 },
    { host: "10.0.0.2", port: 7001 },
  ]);
  assert.equal(redisTls(config), true);
  assert.equal(redisTls({ REDIS_URL: "rediss://a:1", REDIS_CLUSTER_NODES: "" }), true);
  assert.equal(redisTls({ REDIS_URL: "rediss://a:1", REDIS_CLUSTER_NODES: "b:2" }), false);
  assert.equal(redisTls({ REDIS_URL: "redis://a:1", REDIS_CLUSTER_NODES: "" }), false);
});

Deno.test("parseEnv() refuses a REDIS_CLUSTER_NODES that is not host:port pairs", () => {
  for (
    const bad of [
      "redis-1",
      "redis-1:7000,",
      "redis://a:1",
      "a:0",
      "a:70000",
      "a:1 b:2",
      "rediss://a:1,b:2",
      "rediss://a",
    ]
  ) {
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

Deno.test("parseEnv() refuses Redis credentials given both in REDIS_URL and on their own", () => {
  assert.throws(
    () =>
      parseEnv(queueVars, {
        service: "test",
        env: { REDIS_URL: "redis://app:s3cret@redis:6379", REDIS_PASSWORD: "other" },
      }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /REDIS_PASSWORD conflicts with the one in REDIS_URL/);
      assert.doesNotMatch(error.message, /s3cret|other/, "neither password is shown");
      return true;
    },
  );
  assert.throws(
    () =>
      parseEnv(queueVars, {
        service: "test",
        env: { REDIS_URL: "redis://app:pw@redis:6379", REDIS_USERNAME: "app" },
      }),
    /REDIS_USERNAME conflicts with the one in REDIS_URL/,
  );
  // One place each is fine: the user in the URL, the password on its own.
  const config = parseEnv(queueVars, {
    service: "test",
    env: { REDIS_URL: "redis://app@redis:6379", REDIS_PASSWORD: "pw" },
  });
  assert.equal(config.REDIS_PASSWORD, "pw");
});

Deno.test("parseEnv() shows a URL's password as *** and a PASSWORD or TOKEN variable not at all", () => {
  assert.throws(
    () =>
      parseEnv({ ...queueVars, SOME_TOKEN: z.string().min(99) }, {
        service: "test",
        env: { REDIS_URL: "http://user:s3cret@redis:6379", SOME_TOKEN: "t0ken" },
      }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(
        error.message,
        /REDIS_URL .*: current value is "http:\/\/user:\*\*\*@redis:6379"/,
      );
      assert.match(error.message, /SOME_TOKEN .*: current value is \(hidden\)/);
      assert.doesNotMatch(error.message, /s3cret|t0ken/);
      return true;
    },
  );
});

Deno.test("parseEnv() reads REDIS_TLS_CA_FILE once, and names it when missing, not PEM or without TLS", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    await Deno.writeTextFile(`${dir}/ca.pem`, pem);
    await Deno.writeTextFile(`${dir}/key.pem`, "-----BEGIN PRIVATE KEY-----\n");
    const config = parseEnv(queueVars, {
      service: "test",
      env: { REDIS_URL: "rediss://redis:6379", REDIS_TLS_CA_FILE: `${dir}/ca.pem` },
    });
    assert.deepEqual(config.REDIS_TLS_CA_FILE, { path: `${dir}/ca.pem`, pem });
    const refused = (env: Record<string, string>, message: RegExp) =>
      assert.throws(() => parseEnv(queueVars, { service: "test", env }), message);
    refused(
      { REDIS_URL: "rediss://redis:6379", REDIS_TLS_CA_FILE: `${dir}/none.pem` },
      /REDIS_TLS_CA_FILE cannot be read \(.*\): current value is ".*none.pem"/,
    );
    refused(
      { REDIS_URL: "rediss://redis:6379", REDIS_TLS_CA_FILE: `${dir}/key.pem` },
      /REDIS_TLS_CA_FILE must be a PEM file of certificates/,
    );
    refused(
      { REDIS_URL: "redis://redis:6379", REDIS_TLS_CA_FILE: `${dir}/ca.pem` },
      /REDIS_TLS_CA_FILE needs TLS: a rediss:\/\/ REDIS_URL, or rediss:\/\/ REDIS_CLUSTER_NODES/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("parseEnv() refuses a REDIS_URL that is not a redis:// or rediss:// URL", () => {
  for (const bad of ["http://redis:6379", "redis://a b:1", "redis:/x"]) {
    assert.throws(
      () => parseEnv(queueVars, { service: "test", env: { REDIS_URL: bad } }),
      /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/,
      bad,
    );
  }
});
