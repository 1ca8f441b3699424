import assert from "node:assert/strict";
import { FencedError, FetchedBatch } from "@users-pipeline/queue";
import { Acknowledger } from "./acknowledger.ts";
import type { ConsumerEvent, ConsumerMeasurement, ConsumerStats } from "./consumer_events.ts";
import { Retrier } from "./retrier.ts";
import { FakeClock, MemoryQueue, user } from "./test_fakes.ts";

async function setUp({ fetchesWithAck = true } = {}) {
  const clock = new FakeClock();
  const queue = new MemoryQueue();
  const events: ConsumerEvent[] = [];
  const measurements: ConsumerMeasurement[] = [];
  const stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  const retrier = new Retrier({
    clock,
    retryMaxDelayMs: 5_000,
    onEvent: (event) => events.push(event),
    onMeasurement: (measurement) => measurements.push(measurement),
  });
  const acknowledger = new Acknowledger({
    retrier,
    batchSize: 2,
    fetchesWithAck,
    stats,
    onEvent: (event) => events.push(event),
    onMeasurement: (measurement) => measurements.push(measurement),
  });
  await queue.register("c1");
  queue.push(user(1), user(2), user(3), user(4));
  const batch = await queue.fetch({ consumerId: "c1", max: 2 });
  const stored = {
    batch,
    storedIds: [JSON.parse(user(1)).id],
    deadLetters: [{
      payload: user(2),
      reason: "database refused the row: no",
      kind: "database_refused" as const,
      sqlstate: "23514",
      dead_at: new Date(0).toISOString(),
    }],
    insertSeconds: 0.5,
    latenciesSeconds: [1],
  };
  return { queue, events, measurements, stats, retrier, acknowledger, stored };
}

Deno.test("Acknowledger counts a batch once its acknowledgement is accepted, and reports its dead letters", async () => {
  const { queue, events, measurements, stats, acknowledger, stored } = await setUp({
    fetchesWithAck: false,
  });
  assert.equal(await acknowledger.acknowledge(stored, { fetchHeld: 0 }), undefined);
  assert.deepEqual(stats, { stored: 1, deadLettered: 1, batches: 1, recovered: 0 });
  assert.deepEqual(queue.storedIds, stored.storedIds);
  assert.deepEqual(events, [{
    event: "dead_lettered",
    reason: "database refused the row: no",
    sqlstate: "23514",
  }]);
  assert.deepEqual(measurements, [{
    type: "batch_acked",
    items: 2,
    fromRetry: false,
    stored: 1,
    deadLetters: ["database_refused"],
    insertSeconds: 0.5,
    latenciesSeconds: [1],
  }]);
});

Deno.test("Acknowledger carries the next fetch, saying what the consumer still holds", async () => {
  const { queue, acknowledger, stored } = await setUp();
  const next = await acknowledger.acknowledge(stored, { fetchHeld: 0 });
  assert.ok(next instanceof FetchedBatch);
  assert.deepEqual(next.items, [user(3), user(4)]);
  assert.deepEqual(queue.ackFetchHeld, [0]);
});

Deno.test("Acknowledger only acknowledges when stopping, or when the queue fetches separately", async () => {
  const stopping = await setUp();
  stopping.retrier.stop();
  assert.equal(
    await stopping.acknowledger.acknowledge(stopping.stored, { fetchHeld: 0 }),
    undefined,
  );
  assert.deepEqual(stopping.queue.ackFetchHeld, []);
  const sharded = await setUp({ fetchesWithAck: false });
  assert.equal(await sharded.acknowledger.acknowledge(sharded.stored, { fetchHeld: 0 }), undefined);
  assert.deepEqual(sharded.queue.ackFetchHeld, []);
  assert.equal(sharded.stats.batches, 1);
});

Deno.test("Acknowledger fenced rejects and counts nothing: whoever acknowledges the batch counts it", async () => {
  const { queue, events, measurements, stats, acknowledger, stored } = await setUp();
  queue.fence("c1");
  await assert.rejects(acknowledger.acknowledge(stored, { fetchHeld: 0 }), FencedError);
  assert.deepEqual(stats, { stored: 0, deadLettered: 0, batches: 0, recovered: 0 });
  assert.deepEqual(events, []);
  assert.deepEqual(measurements, []);
  assert.deepEqual(queue.dead, []);
});
