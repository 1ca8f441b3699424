import assert from "node:assert/strict";
import { batchSizeOf, loadConsumerConfig, loopOptions } from "./config.ts";

Deno.test("loadConsumerConfig() defaults to batch mode with 1000 rows per statement", () => {
  const config = loadConsumerConfig({});
  assert.equal(config.CONSUMER_MODE, "batch");
  assert.equal(batchSizeOf(config), 1000);
});

Deno.test("batchSizeOf() makes single mode a batch of one", () => {
  assert.equal(batchSizeOf(loadConsumerConfig({ CONSUMER_MODE: "single", BATCH_SIZE: "500" })), 1);
});

Deno.test("loadConsumerConfig() names a bad mode and an out-of-range batch size", () => {
  assert.throws(
    () => loadConsumerConfig({ CONSUMER_MODE: "turbo", BATCH_SIZE: "0" }),
    /Cannot start server-consumer: .*CONSUMER_MODE .*"turbo".*BATCH_SIZE .*"0"/,
  );
});

Deno.test("loopOptions() hands the loop its settings, single mode as a batch of one", () => {
  const config = loadConsumerConfig({
    CONSUMER_MODE: "single",
    HEARTBEAT_TTL_MS: "1000",
    RECOVERY_INTERVAL_MS: "200",
    MAX_CRASHES: "4",
    BLOCK_TIMEOUT_SECONDS: "1",
    RETRY_MAX_DELAY_MS: "500",
    SHUTDOWN_TIMEOUT_MS: "9000",
  });
  assert.deepEqual(loopOptions(config), {
    batchSize: 1,
    heartbeatTtlMs: 1_000,
    recoveryIntervalMs: 200,
    maxCrashes: 4,
    blockTimeoutSeconds: 1,
    retryMaxDelayMs: 500,
    shutdownTimeoutMs: 9_000,
  });
});
