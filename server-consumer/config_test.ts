import assert from "node:assert/strict";
import { batchSizeOf, loadConsumerConfig } from "./config.ts";

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
