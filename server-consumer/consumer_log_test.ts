import assert from "node:assert/strict";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { logConsumerEvent } from "./consumer_log.ts";

function memoryLog() {
  const records: Record<string, unknown>[] = [];
  const log = new EventLog("server-consumer", {
    write: (line) => records.push(JSON.parse(line)),
  });
  return { log, records };
}

Deno.test("logConsumerEvent() writes the event's fields as they are, with a level and a sentence", () => {
  const { log, records } = memoryLog();
  logConsumerEvent(log, { event: "consumer_started", consumer_id: "c1", batch_size: 5 });
  const { time: _, ...record } = records[0]!;
  assert.deepEqual(record, {
    level: "info",
    service: "server-consumer",
    event: "consumer_started",
    consumer_id: "c1",
    batch_size: 5,
    msg: "consumer c1 started (batch size 5)",
  });
});

Deno.test("logConsumerEvent() writes an outage's error as its message, at level warn", () => {
  const { log, records } = memoryLog();
  logConsumerEvent(log, {
    event: "outage_started",
    dependency: "postgres",
    error: new Error("connection refused"),
  });
  assert.equal(records[0]!.level, "warn");
  assert.equal(records[0]!.error, "connection refused");
  assert.equal(records[0]!.msg, "postgres unavailable, retrying with backoff: connection refused");
});

Deno.test("logConsumerEvent() names the SQLSTATE of a dead letter only when there is one", () => {
  const { log, records } = memoryLog();
  logConsumerEvent(log, { event: "dead_lettered", reason: "item is not valid JSON" });
  logConsumerEvent(log, { event: "dead_lettered", reason: "refused", sqlstate: "23514" });
  assert.ok(!("sqlstate" in records[0]!));
  assert.equal(records[1]!.sqlstate, "23514");
  assert.equal(records[1]!.msg, "dead-lettered: refused (23514)");
});
