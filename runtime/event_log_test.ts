import assert from "node:assert/strict";
import { errorText, EventLog, type LogLevel } from "./event_log.ts";

/** A log writing into an array at a fixed time. */
function memoryLog() {
  const lines: { line: string; level: LogLevel }[] = [];
  const log = new EventLog("server-consumer", {
    write: (line, level) => lines.push({ line, level }),
    now: () => new Date(Date.UTC(2025, 0, 2, 3, 4, 5, 6)),
  });
  return { log, lines };
}

Deno.test("EventLog writes one JSON object per line: time, level, service, event, fields, msg", () => {
  const { log, lines } = memoryLog();
  log.info("consumer_started", { consumer_id: "c1", batch_size: 10, msg: "consumer c1 started" });
  assert.equal(lines.length, 1);
  assert.equal(
    lines[0]!.line,
    '{"time":"2025-01-02T03:04:05.006Z","level":"info","service":"server-consumer",' +
      '"event":"consumer_started","consumer_id":"c1","batch_size":10,"msg":"consumer c1 started"}',
  );
});

Deno.test("EventLog writes the replica's id after the service when it has one", () => {
  const lines: string[] = [];
  const log = new EventLog("server", {
    replica: "server-2",
    write: (line) => lines.push(line),
    now: () => new Date(Date.UTC(2025, 0, 2, 3, 4, 5, 6)),
  });
  log.info("listening", { port: 8000, msg: "listening on :8000" });
  assert.equal(
    lines[0],
    '{"time":"2025-01-02T03:04:05.006Z","level":"info","service":"server","replica":"server-2",' +
      '"event":"listening","port":8000,"msg":"listening on :8000"}',
  );
});

Deno.test("EventLog passes each level to the writer and keeps a record on one line", () => {
  const { log, lines } = memoryLog();
  log.warn("outage_started", { dependency: "redis", error: "down\nhard", msg: "a\nb" });
  log.error("config_invalid", { error: "bad", msg: "Cannot start" });
  assert.deepEqual(lines.map((l) => l.level), ["warn", "error"]);
  assert.ok(lines.every(({ line }) => !line.includes("\n")));
  assert.equal(JSON.parse(lines[0]!.line).error, "down\nhard");
});

Deno.test("EventLog writes an Error field as its message", () => {
  const { log, lines } = memoryLog();
  log.warn("redis_unavailable", { error: new Error("connect ECONNREFUSED"), msg: "redis down" });
  assert.equal(JSON.parse(lines[0]!.line).error, "connect ECONNREFUSED");
});

Deno.test("errorText() falls back to the code, then the name, of an error without a message", () => {
  assert.equal(
    errorText(Object.assign(new AggregateError([], ""), { code: "ECONNREFUSED" })),
    "ECONNREFUSED",
  );
  assert.equal(errorText(new RangeError("")), "RangeError");
  assert.equal(errorText("plain"), "plain");
});

Deno.test("EventLog's fields cannot replace the keys it sets itself", () => {
  const { log } = memoryLog();
  // @ts-expect-error: the event's name is the first argument, not a field
  log.info("a", { event: "b", msg: "m" });
  // @ts-expect-error: the replica is the log's, not an event's
  log.info("a", { replica: "other", msg: "m" });
  // @ts-expect-error: every record needs its sentence
  log.info("a", { port: 1 });
});
