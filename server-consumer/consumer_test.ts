import assert from "node:assert/strict";
import { DeadlineError } from "@users-pipeline/runtime/deadline";
import { Consumer, HAND_BACK_TIMEOUT_MS } from "./consumer.ts";
import type { ConsumerEvent, ConsumerMeasurement } from "./consumer_events.ts";
import { FakeClock, MemoryQueue, MemoryStore, pgError, until, user } from "./test_fakes.ts";

/** The outage events among `events`, as [event, dependency]. */
function outages(events: readonly ConsumerEvent[]): [string, string][] {
  return events.flatMap((e) =>
    e.event === "outage_started" || e.event === "outage_ended" ? [[e.event, e.dependency]] : []
  );
}

/** A consumer over the fakes, its events, and its first id `c1` (then `c2`, …). */
function setUp(
  options: {
    shutdownTimeoutMs?: number;
    waitForItems?: (seconds: number) => Promise<unknown>;
    batchSize?: number;
  } = {},
) {
  const clock = new FakeClock();
  const queue = new MemoryQueue();
  const store = new MemoryStore();
  const events: ConsumerEvent[] = [];
  const measurements: ConsumerMeasurement[] = [];
  let ids = 0;
  // A wait the loop gave up at stop still ends by itself on a real connection;
  // here it ends when the test stops the consumer, so no fake timer is left over.
  const stopping = new AbortController();
  const consumer = new Consumer({
    queue,
    waitForItems: options.waitForItems ??
      ((seconds) => clock.sleep(seconds * 1_000, stopping.signal)),
    store,
    batchSize: options.batchSize ?? 10,
    heartbeatTtlMs: 5_000,
    recoveryIntervalMs: 2_000,
    maxCrashes: 3,
    blockTimeoutSeconds: 2,
    retryMaxDelayMs: 5_000,
    shutdownTimeoutMs: options.shutdownTimeoutMs ?? 20_000,
    newId: () => `c${++ids}`,
    onEvent: (event) => events.push(event),
    onMeasurement: (measurement) => measurements.push(measurement),
    clock,
  });
  const named = <E extends ConsumerEvent["event"]>(name: E) =>
    events.filter((e): e is Extract<ConsumerEvent, { event: E }> => e.event === name);
  /** Stops the consumer and waits for its loop to end, stepping time as needed. */
  const stop = async () => {
    let ended = false;
    stopping.abort();
    const stopped = consumer.stop().then(() => void (ended = true));
    await until(clock, () => ended, "the loop end");
    await stopped;
  };
  return { clock, queue, store, events, measurements, named, consumer, stop };
}

Deno.test("Consumer reports consumer_started once registered, and stops its timers on stop", async () => {
  const { clock, queue, named, consumer, stop } = setUp();
  void consumer.consume();
  await until(clock, () => named("consumer_started").length === 1, "consumer_started");
  assert.deepEqual(named("consumer_started"), [
    { event: "consumer_started", consumer_id: "c1", batch_size: 10 },
  ]);
  assert.ok(queue.members.has("c1"));
  await stop();
  assert.deepEqual(named("handed_back"), [{ event: "handed_back", consumer_id: "c1", items: 0 }]);
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer re-registers under a new id when a fetch finds it fenced", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  void consumer.consume();
  await until(clock, () => named("consumer_started").length === 1, "consumer_started");
  queue.fence("c1");
  await until(clock, () => named("consumer_fenced").length === 1, "consumer_fenced");
  assert.deepEqual(named("consumer_fenced"), [{
    event: "consumer_fenced",
    consumer_id: "c1",
    new_consumer_id: "c2",
    reason: "its heartbeat expired and its work was recovered by others",
  }]);
  assert.deepEqual(queue.registered, ["c1", "c2"]);
  assert.equal(consumer.id, "c2");
  queue.push(user(1));
  await until(clock, () => consumer.stats.batches === 1, "the batch under the new id");
  assert.equal(store.rows.size, 1);
  await stop();
});

Deno.test("Consumer counts a batch once when its acknowledgement is refused and it is redelivered", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  queue.push(user(1), "{not json", user(2));
  // Presumed dead while storing: the others recover the batch before the ack.
  store.beforeInsert = () => {
    store.beforeInsert = () => {};
    queue.fence(consumer.id);
  };
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the redelivered batch acknowledged");
  assert.deepEqual(named("consumer_fenced").map((e) => [e.consumer_id, e.new_consumer_id]), [
    ["c1", "c2"],
  ]);
  assert.equal(
    named("consumer_fenced")[0]!.reason,
    "its heartbeat expired and its work was recovered by others",
  );
  assert.deepEqual(consumer.stats, { stored: 2, deadLettered: 1, batches: 1, recovered: 0 });
  assert.equal(queue.dead.length, 1);
  assert.equal(named("dead_lettered").length, 1);
  assert.equal(store.rows.size, 2);
  await stop();
});

Deno.test("Consumer retries a failing PostgreSQL with backoff, reporting the outage once at each end", async () => {
  const { clock, queue, store, events, named, consumer, stop } = setUp();
  const refused = pgError("ECONNREFUSED", "connection refused");
  store.failures.push(refused, refused, refused);
  queue.push(user(1));
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the batch stored after the outage");
  assert.deepEqual(outages(events), [["outage_started", "postgres"], ["outage_ended", "postgres"]]);
  assert.equal(named("outage_started")[0]?.error, refused);
  const [ended] = named("outage_ended");
  assert.equal(ended?.failures, 3);
  // Three backoff pauses passed on the clock, none on the wall.
  assert.ok(ended!.ms > 0, `the outage lasted ${ended!.ms} ms`);
  assert.equal(store.statements, 4);
  assert.equal(store.rows.size, 1);
  await stop();
});

Deno.test("Consumer retries a failing Redis fetch, reporting the outage once at each end", async () => {
  const { clock, queue, events, named, consumer, stop } = setUp();
  const closed = new Error("Connection is closed.");
  queue.fetchFailures.push(closed, closed, closed, closed, closed);
  queue.push(user(1));
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the batch after the outage");
  assert.deepEqual(outages(events), [["outage_started", "redis"], ["outage_ended", "redis"]]);
  assert.equal(named("outage_ended")[0]?.failures, 5);
  await stop();
});

Deno.test("Consumer dead-letters a bad envelope and a row refused for its data, storing the rest", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  queue.push(user(1), "{not json", user(2, "bad row"), user(3));
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the mixed batch acknowledged");
  assert.deepEqual([...store.rows.values()], ["user 1", "user 3"]);
  assert.deepEqual(named("dead_lettered"), [
    { event: "dead_lettered", reason: "item is not valid JSON" },
    {
      event: "dead_lettered",
      reason: 'database refused the row: new row violates check constraint "users_name"',
      sqlstate: "23514",
    },
  ]);
  assert.deepEqual(queue.dead.map((d) => d.payload), ["{not json", user(2, "bad row")]);
  // The kinds the dead letters are counted by, the ids the index learns about.
  assert.deepEqual(queue.dead.map((d) => [d.kind, d.id]), [
    ["invalid_item", undefined],
    ["database_refused", "00000000-0000-7000-8000-000000000002"],
  ]);
  assert.deepEqual(queue.storedIds, [
    "00000000-0000-7000-8000-000000000001",
    "00000000-0000-7000-8000-000000000003",
  ]);
  assert.deepEqual(consumer.stats, { stored: 2, deadLettered: 2, batches: 1, recovered: 0 });
  // The loop goes on: the next batch is taken as usual.
  queue.push(user(4));
  await until(clock, () => consumer.stats.batches === 2, "the next batch");
  assert.equal(store.rows.size, 3);
  await stop();
});

Deno.test("Consumer hands its batch back when stopping outlasts the shutdown deadline", async () => {
  const { clock, queue, store, events, named, consumer, stop } = setUp({
    shutdownTimeoutMs: 1_000,
  });
  store.failForever = pgError("57P03", "the database system is starting up");
  queue.push(user(1), user(2));
  void consumer.consume();
  await until(clock, () => named("outage_started").length === 1, "the outage");
  const stoppedAt = clock.now();
  await stop();
  assert.deepEqual(
    events.slice(-2),
    [
      { event: "shutdown_deadline", items: 2 },
      { event: "handed_back", consumer_id: "c1", items: 2 },
    ],
  );
  assert.ok(clock.now() - stoppedAt >= 1_000, `stopped after ${clock.now() - stoppedAt} ms`);
  assert.deepEqual(queue.items, [user(1), user(2)]);
  assert.equal(queue.members.size, 0);
  assert.deepEqual(consumer.stats, { stored: 0, deadLettered: 0, batches: 0, recovered: 0 });
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer stops at once while waiting for items, giving the wait up", async () => {
  const { clock, named, consumer, stop } = setUp({ waitForItems: () => new Promise(() => {}) });
  void consumer.consume();
  await until(clock, () => named("consumer_started").length === 1, "consumer_started");
  const stoppedAt = clock.now();
  await stop();
  assert.equal(clock.now(), stoppedAt, "no time passed");
  assert.deepEqual(named("handed_back"), [{ event: "handed_back", consumer_id: "c1", items: 0 }]);
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer stops at once during a Redis outage when it holds nothing", async () => {
  const { clock, queue, named, consumer, stop } = setUp();
  const closed = new Error("Connection is closed.");
  queue.fetchFailures.push(...Array.from({ length: 1_000 }, () => closed));
  void consumer.consume();
  await until(clock, () => named("outage_started").length === 1, "the outage");
  const stoppedAt = clock.now();
  await stop();
  assert.equal(clock.now(), stoppedAt, "no backoff pause was waited out");
  assert.deepEqual(named("shutdown_deadline"), []);
  assert.equal(named("handed_back").length, 1);
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer gives up an insert still waiting at the shutdown deadline and hands the batch back", async () => {
  const { clock, queue, store, events, consumer, stop } = setUp({ shutdownTimeoutMs: 1_000 });
  store.frozen = true;
  queue.push(user(1), user(2));
  void consumer.consume();
  await until(clock, () => store.statements === 1, "the insert under way");
  const stoppedAt = clock.now();
  await stop();
  assert.equal(clock.now() - stoppedAt, 1_000, "stopped at the deadline, not after the insert");
  assert.deepEqual(events.slice(-2), [
    { event: "shutdown_deadline", items: 2 },
    { event: "handed_back", consumer_id: "c1", items: 2 },
  ]);
  assert.deepEqual(queue.items, [user(1), user(2)]);
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer bounds the hand-back by HAND_BACK_TIMEOUT_MS when Redis is frozen", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp({ shutdownTimeoutMs: 1_000 });
  queue.push(user(1));
  // Stored, then Redis freezes before the acknowledgement.
  store.beforeInsert = () => void (queue.frozen = true);
  void consumer.consume();
  await until(clock, () => store.rows.size === 1, "the row stored");
  const stoppedAt = clock.now();
  await stop();
  assert.equal(clock.now() - stoppedAt, 1_000 + HAND_BACK_TIMEOUT_MS);
  assert.deepEqual(named("shutdown_deadline"), [{ event: "shutdown_deadline", items: 1 }]);
  const [failed] = named("hand_back_failed");
  assert.ok(failed?.error instanceof DeadlineError, String(failed?.error));
  // Still in its processing list: recovered once the heartbeat expires.
  assert.deepEqual(queue.held.get("c1"), [user(1)]);
  assert.equal(clock.pending, 0);
});

Deno.test("Consumer dead-letters an item with a field the envelope does not have", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  const extra = JSON.stringify({ ...JSON.parse(user(2)), admin: true });
  queue.push(user(1), extra);
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the batch acknowledged");
  assert.deepEqual(named("dead_lettered"), [{
    event: "dead_lettered",
    reason: 'item has unexpected field "admin": only "id", "name" and "enqueued_at" are accepted',
  }]);
  assert.deepEqual(queue.dead.map((d) => d.payload), [extra]);
  assert.equal(store.rows.size, 1);
  await stop();
});

Deno.test("Consumer measures each acknowledged batch and every failed call, not only an outage's first", async () => {
  const { clock, queue, store, measurements, consumer, stop } = setUp();
  store.failures.push(pgError("57P01", "terminating connection"), new Error("timeout"));
  queue.push(user(1), "{not json", user(2, "bad row"), user(3));
  void consumer.consume();
  await until(clock, () => consumer.stats.batches === 1, "the batch acknowledged");
  const failed = measurements.flatMap((m) => m.type === "call_failed" ? [m] : []);
  assert.deepEqual(failed.map((m) => [m.dependency, (m.error as Error).message]), [
    ["postgres", "terminating connection"],
    ["postgres", "timeout"],
  ]);
  const acked = measurements.flatMap((m) => m.type === "batch_acked" ? [m] : []);
  assert.equal(acked.length, 1);
  const { latenciesSeconds, ...batch } = acked[0]!;
  assert.deepEqual(batch, {
    type: "batch_acked",
    items: 4,
    fromRetry: false,
    stored: 2,
    deadLetters: ["invalid_item", "database_refused"],
    // The fake clock stands still during an insert.
    insertSeconds: 0,
  });
  // One per row stored, each from its enqueue (time 0 here) to the commit.
  assert.equal(latenciesSeconds.length, 2);
  assert.ok(latenciesSeconds.every((s) => s === latenciesSeconds[0] && s >= 0));
  await stop();
});

Deno.test("Consumer fetches the next batch while storing one, saying what it holds", async () => {
  const { clock, queue, store, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 25 }, (_, i) => user(i)));
  const heldAtInsert: number[] = [];
  store.beforeInsert = () => heldAtInsert.push(queue.held.get("c1")?.length ?? 0);
  void consumer.consume();
  await until(clock, () => store.rows.size === 25, "every row stored");
  // The first batch after starting is fetched alone and the second with its
  // acknowledgement; the third early, during the second's insert, and its
  // insert starts at once, the second still held; the third, not full, found
  // the list dry.
  assert.deepEqual(heldAtInsert, [10, 15, 15]);
  assert.deepEqual(queue.fetchHeld, [0, 10]);
  // The second and last batches came with an acknowledgement, holding nothing
  // else; the third with the second's, holding the third (5 items).
  assert.deepEqual(queue.ackFetchHeld, [0, 5, 0]);
  assert.deepEqual(queue.storedIds, Array.from({ length: 25 }, (_, i) => JSON.parse(user(i)).id));
  await stop();
  assert.deepEqual(queue.items, [], "nothing handed back: every batch was acknowledged");
});

Deno.test("Consumer starts the insert of the batch fetched early before the one in hand commits, and acknowledges them in order", async () => {
  const { clock, queue, store, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 40 }, (_, i) => user(i)));
  // Each insert answers only once the next one has started (or after 50 ms of
  // fake time, when none follows): an insert that waited for the previous
  // commit would find none running.
  const insert = store.insert.bind(store);
  let running: (() => void) | undefined;
  const overlapped: boolean[] = [];
  store.insert = (users) => {
    overlapped.push(running !== undefined);
    running?.();
    return new Promise((resolve, reject) => {
      const answer = () => {
        if (running === answer) running = undefined;
        insert(users).then(resolve, reject);
      };
      running = answer;
      void clock.sleep(50).then(answer);
    });
  };
  void consumer.consume();
  await until(clock, () => store.rows.size === 40, "every row stored");
  // The first two batches are fetched one after the other (the first alone,
  // the second with its acknowledgement); from the third on, each is taken
  // and stored during the previous insert.
  assert.deepEqual(overlapped, [false, false, true, true]);
  assert.deepEqual(queue.storedIds, Array.from({ length: 40 }, (_, i) => JSON.parse(user(i)).id));
  await stop();
  assert.deepEqual(queue.items, [], "nothing handed back: every batch was acknowledged");
});

Deno.test("Consumer in flow holds two batches beside the one in hand, and a partial batch ends the lookahead", async () => {
  const { clock, queue, store, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 65 }, (_, i) => user(i)));
  const heldAtInsert: number[] = [];
  store.beforeInsert = () => heldAtInsert.push(queue.held.get("c1")?.length ?? 0);
  void consumer.consume();
  await until(clock, () => store.rows.size === 65, "every row stored");
  // Batches of 10: the first alone, the second with its acknowledgement, the
  // third early, the fourth with the second's acknowledgement and the fifth
  // by a fetch once that settled; from then on each acknowledgement takes
  // one, so at most three batches (30 items) are held, until the seventh (5
  // items) emptied the queue.
  assert.deepEqual(heldAtInsert, [10, 20, 20, 20, 30, 30, 25]);
  assert.deepEqual(queue.fetchHeld, [0, 10, 20]);
  // Each call says what the consumer holds besides what it takes.
  assert.deepEqual(queue.ackFetchHeld, [0, 10, 20, 20, 15, 5, 0]);
  assert.deepEqual(queue.storedIds, Array.from({ length: 65 }, (_, i) => JSON.parse(user(i)).id));
  await stop();
  assert.deepEqual(queue.items, [], "nothing handed back: every batch was acknowledged");
});

Deno.test("Consumer fenced when it fetches a second batch ahead re-registers and acknowledges nothing as before", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 65 }, (_, i) => user(i)));
  store.beforeInsert = () => {
    // The fourth batch's insert, started as the second's acknowledgement
    // brought it, right before the fetch of the fifth.
    if (store.statements === 4) queue.fence("c1");
  };
  void consumer.consume();
  await until(clock, () => store.rows.size === 65, "every row stored");
  assert.deepEqual(
    queue.fetchHeld.slice(0, 3),
    [0, 10, 20],
    "the fetch of the fifth found c1 fenced",
  );
  assert.equal(named("consumer_fenced").length, 1);
  assert.deepEqual(queue.registered, ["c1", "c2"]);
  // c1 acknowledged the first two batches; c2 stored the rest, the batches c1 held included.
  assert.equal(queue.storedIds.length, 65);
  assert.equal(new Set(queue.storedIds).size, 65);
  await stop();
});

Deno.test("Consumer in single mode fetches with each acknowledgement the item after the next", async () => {
  const { clock, queue, store, consumer, stop } = setUp({ batchSize: 1 });
  queue.push(...Array.from({ length: 5 }, (_, i) => user(i)));
  void consumer.consume();
  await until(clock, () => store.rows.size === 5, "every row stored");
  // A fetch to start, the second item with the first's acknowledgement, the
  // third early; from then on each acknowledgement takes the item after the
  // next, during the next one's insert: one call per item.
  assert.deepEqual(queue.fetchHeld, [0, 1]);
  assert.deepEqual(queue.ackFetchHeld, [0, 1, 1, 1, 0]);
  assert.deepEqual(queue.storedIds, Array.from({ length: 5 }, (_, i) => JSON.parse(user(i)).id));
  await stop();
  assert.deepEqual(queue.items, [], "nothing handed back");
});

Deno.test("Consumer in single mode stopped mid-insert stores the item fetched early, and takes no more", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp({ batchSize: 1 });
  queue.push(...Array.from({ length: 5 }, (_, i) => user(i)));
  store.beforeInsert = () => {
    // The second item's insert: the third is already taken.
    if (store.statements === 2) void consumer.stop();
  };
  void consumer.consume();
  await until(clock, () => store.rows.size === 3, "both items in hand stored");
  await stop();
  assert.equal(store.statements, 3);
  // Only the first acknowledgement fetched: the others were sent while stopping.
  assert.deepEqual(queue.ackFetchHeld, [0]);
  assert.equal(queue.items.length, 2, "the fourth and fifth were never taken");
  assert.deepEqual(named("handed_back"), [{ event: "handed_back", consumer_id: "c1", items: 0 }]);
});

Deno.test("Consumer fenced while storing drops the batch it fetched early: recovery has it", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 30 }, (_, i) => user(i)));
  store.beforeInsert = () => {
    // The second batch's insert: the third is already taken.
    if (store.statements === 2) queue.fence("c1");
  };
  void consumer.consume();
  await until(clock, () => store.rows.size === 30, "every row stored");
  assert.equal(named("consumer_fenced").length, 1);
  // c1's second acknowledgement was refused; c2 stored the rest, the early batch included.
  assert.equal(queue.storedIds.length, 30);
  assert.equal(new Set(queue.storedIds).size, 30);
  await stop();
});

Deno.test("Consumer stopped mid-insert also stores the batch it fetched early, and takes no more", async () => {
  const { clock, queue, store, named, consumer, stop } = setUp();
  queue.push(...Array.from({ length: 40 }, (_, i) => user(i)));
  store.beforeInsert = () => {
    // The second batch's insert: the third is already taken.
    if (store.statements === 2) void consumer.stop();
  };
  void consumer.consume();
  await until(clock, () => store.rows.size === 30, "both batches in hand stored");
  await stop();
  assert.equal(store.statements, 3);
  assert.equal(queue.items.length, 10, "the fourth batch was never taken");
  assert.deepEqual(named("handed_back"), [{ event: "handed_back", consumer_id: "c1", items: 0 }]);
});
