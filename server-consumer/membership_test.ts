import assert from "node:assert/strict";
import type { ConsumerEvent, ConsumerStats } from "./consumer_events.ts";
import { Membership } from "./membership.ts";
import { Retrier } from "./retrier.ts";
import { FakeClock, MemoryQueue, until } from "./test_fakes.ts";

function setUp() {
  const clock = new FakeClock();
  const queue = new MemoryQueue();
  const events: ConsumerEvent[] = [];
  const stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  const retrier = new Retrier({
    clock,
    retryMaxDelayMs: 5_000,
    onEvent: () => {},
    onMeasurement: () => {},
  });
  let ids = 0;
  const membership = new Membership({
    queue,
    retrier,
    clock,
    heartbeatTtlMs: 3_000,
    recoveryIntervalMs: 2_000,
    maxCrashes: 3,
    newId: () => `c${++ids}`,
    onEvent: (event) => events.push(event),
    stats,
  });
  return { clock, queue, events, stats, membership };
}

Deno.test("Membership registers its id, and takes and registers a new one once fenced", async () => {
  const { queue, events, membership } = setUp();
  await membership.register();
  assert.equal(membership.id, "c1");
  await membership.reregister("a reason");
  assert.equal(membership.id, "c2");
  assert.deepEqual(queue.registered, ["c1", "c2"]);
  assert.deepEqual(events, [{
    event: "consumer_fenced",
    consumer_id: "c1",
    new_consumer_id: "c2",
    reason: "a reason",
  }]);
});

Deno.test("Membership's timers beat the heart and recover at once and on each tick, until stopped", async () => {
  const { clock, queue, events, stats, membership } = setUp();
  let beats = 0;
  queue.heartbeat = () => {
    beats++;
    return Promise.resolve();
  };
  let recoveries = 0;
  queue.recover = () =>
    Promise.resolve({ recovered: recoveries++ === 1 ? 2 : 0, buried: 0, consumers: 1 });
  const stop = membership.startTimers();
  await until(clock, () => beats >= 2 && recoveries >= 2, "two beats and two recoveries");
  stop();
  assert.equal(clock.pending, 0);
  assert.equal(stats.recovered, 2);
  assert.deepEqual(events.filter((e) => e.event === "recovered").slice(0, 2), [
    { event: "recovered", items: 0, buried: 0, consumers: 1 },
    { event: "recovered", items: 2, buried: 0, consumers: 1 },
  ]);
});

Deno.test("Membership's heartbeat, once fenced, keeps its id and beating: the fetch loop takes the new one", async () => {
  const { clock, queue, events, membership } = setUp();
  await membership.register();
  queue.fence("c1");
  let refused = 0;
  const beat = queue.heartbeat.bind(queue);
  queue.heartbeat = (id) =>
    beat(id).catch((error) => {
      refused++;
      throw error;
    });
  const stop = membership.startTimers();
  await until(clock, () => refused >= 2, "two refused beats");
  stop();
  assert.equal(membership.id, "c1");
  assert.deepEqual(queue.registered, ["c1"]);
  assert.deepEqual(events.filter((e) => e.event === "consumer_fenced"), []);
});
