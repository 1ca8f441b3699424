import assert from "node:assert/strict";
import {
  apiRedisOptions,
  clusterOptions,
  connectionOptions,
  consumerBlockingOptions,
  consumerCommandOptions,
} from "./redis_options.ts";

Deno.test("every Redis role fails fast and keeps reconnecting at most a second apart", () => {
  for (const options of [apiRedisOptions(500), consumerCommandOptions, consumerBlockingOptions]) {
    assert.equal(options.enableOfflineQueue, false);
    assert.equal(options.maxRetriesPerRequest, 0);
    assert.deepEqual([1, 5, 50].map((n) => options.retryStrategy?.(n)), [100, 500, 1_000]);
  }
});

Deno.test("apiRedisOptions() bounds connecting and every command by the API's timeout", () => {
  const options = apiRedisOptions(750);
  assert.equal(options.commandTimeout, 750);
  assert.equal(options.connectTimeout, 750);
});

Deno.test("the consumer's blocking client has no command timeout to cut a wait short", () => {
  assert.equal(consumerBlockingOptions.commandTimeout, undefined);
  assert.equal(consumerCommandOptions.commandTimeout, 10_000);
});

Deno.test("clusterOptions() lifts queueing and reconnecting to the cluster, keeps the rest per node", () => {
  const options = clusterOptions(apiRedisOptions(750), ["queueRecover", "queueOverview"]);
  assert.equal(options.enableOfflineQueue, false);
  assert.equal(options.enableAutoPipelining, true);
  assert.equal(options.scaleReads, "master");
  assert.deepEqual([1, 50].map((n) => options.clusterRetryStrategy?.(n)), [100, 1_000]);
  assert.deepEqual(options.redisOptions, {
    maxRetriesPerRequest: 0,
    commandTimeout: 750,
    connectTimeout: 750,
  });
  // Scripts whose first argument is their key count must not be auto-pipelined by it.
  assert.deepEqual(options.autoPipeliningIgnoredCommands, ["queueRecover", "queueOverview"]);
});

Deno.test("connectionOptions() logs in with REDIS_USERNAME and REDIS_PASSWORD, TLS only for rediss://", () => {
  const ca = { path: "/ca.pem", pem: "-----BEGIN CERTIFICATE-----" };
  assert.deepEqual(connectionOptions({ REDIS_URL: "redis://r:6379", REDIS_CLUSTER_NODES: "" }), {});
  assert.deepEqual(
    connectionOptions({
      REDIS_URL: "rediss://r:6379",
      REDIS_CLUSTER_NODES: "",
      REDIS_USERNAME: "app",
      REDIS_PASSWORD: "pw",
      REDIS_TLS_CA_FILE: ca,
    }),
    { username: "app", password: "pw", tls: { ca: ca.pem } },
  );
  // A standalone URL's credentials, decoded, unless given on their own.
  assert.deepEqual(
    connectionOptions({ REDIS_URL: "redis://app:p%40ss@r:6379", REDIS_CLUSTER_NODES: "" }),
    { username: "app", password: "p@ss" },
  );
  assert.deepEqual(
    connectionOptions({
      REDIS_URL: "redis://app@r:6379",
      REDIS_CLUSTER_NODES: "",
      REDIS_PASSWORD: "pw",
    }),
    { username: "app", password: "pw" },
  );
  // A cluster: TLS from its nodes' scheme, the seed names kept as written for the certificate.
  const cluster = connectionOptions({
    REDIS_URL: "rediss://unused:1",
    REDIS_CLUSTER_NODES: "rediss://a:7000,rediss://b:7001",
    REDIS_PASSWORD: "pw",
  });
  assert.deepEqual(cluster.tls, {});
  assert.equal(cluster.password, "pw");
  let resolved: string | undefined;
  cluster.dnsLookup?.("redis-1.example", (_, address) => resolved = address);
  assert.equal(resolved, "redis-1.example");
  assert.deepEqual(
    connectionOptions({ REDIS_URL: "rediss://unused:1", REDIS_CLUSTER_NODES: "a:7000" }),
    {},
  );
});
