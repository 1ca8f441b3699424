import assert from "node:assert/strict";
import {
  currentConsumerId,
  hasEvent,
  numberField,
  parseEvent,
  serviceEvents,
} from "./service_events.ts";

const record = (fields: Record<string, unknown>) =>
  JSON.stringify({
    time: "2025-01-01T00:00:00.000Z",
    level: "info",
    service: "server-consumer",
    ...fields,
    msg: "prose that tests never read",
  });

Deno.test("parseEvent() reads a JSON record with an event name", () => {
  const event = parseEvent(record({ event: "consumer_started", consumer_id: "a", batch_size: 5 }));
  assert.equal(event?.event, "consumer_started");
  assert.equal(event?.consumer_id, "a");
  assert.equal(event?.service, "server-consumer");
});

Deno.test("parseEvent() skips prose, broken JSON and records without an event name", () => {
  for (
    const line of [
      "consumer 0190 started (batch size 1000)",
      '{"event": "consumer_started"',
      "[1, 2]",
      "null",
      '{"msg": "no event"}',
      '{"event": 5}',
      "",
    ]
  ) {
    assert.equal(parseEvent(line), undefined, line);
  }
});

Deno.test("serviceEvents() keeps the order and filters by name", () => {
  const lines = [
    record({ event: "outage_started", dependency: "redis", error: "ECONNREFUSED" }),
    "error: Uncaught (in promise) Error: something printed by the runtime",
    record({ event: "outage_ended", dependency: "redis", ms: 1200, failures: 3 }),
    record({ event: "outage_started", dependency: "postgres", error: "timeout" }),
  ];
  assert.deepEqual(serviceEvents(lines).map((e) => e.event), [
    "outage_started",
    "outage_ended",
    "outage_started",
  ]);
  assert.deepEqual(
    serviceEvents(lines, "outage_started").map((e) => e.dependency),
    ["redis", "postgres"],
  );
  assert.ok(hasEvent(lines, "outage_ended"));
  assert.ok(!hasEvent(lines, "stopped"));
});

Deno.test("numberField() reads a number and refuses anything else", () => {
  const event = parseEvent(record({ event: "handed_back", consumer_id: "a", items: 12 }))!;
  assert.equal(numberField(event, "items"), 12);
  assert.throws(() => numberField(event, "consumer_id"), {
    name: "TypeError",
    message: 'Cannot read handed_back.consumer_id as a number: current value is "a"',
  });
  assert.throws(() => numberField(event, "missing"), {
    name: "TypeError",
    message: /handed_back\.missing .* undefined$/,
  });
});

Deno.test("currentConsumerId() follows registration and fencing", () => {
  const started = record({ event: "consumer_started", consumer_id: "first", batch_size: 1 });
  const fenced = record({
    event: "consumer_fenced",
    consumer_id: "first",
    new_consumer_id: "second",
    reason: "heartbeat expired",
  });
  assert.equal(currentConsumerId([]), undefined);
  assert.equal(currentConsumerId(["prose", started]), "first");
  assert.equal(currentConsumerId([started, fenced]), "second");
});
