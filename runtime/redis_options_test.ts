import assert from "node:assert/strict";
import {
  apiRedisOptions,
  clusterOptions,
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
