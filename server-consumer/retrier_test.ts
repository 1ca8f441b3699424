import assert from "node:assert/strict";
import { DeadlineError } from "@users-pipeline/runtime/deadline";
import { FencedError } from "@users-pipeline/queue";
import type { ConsumerEvent, ConsumerMeasurement } from "./consumer_events.ts";
import { Abandoned, Retrier } from "./retrier.ts";
import { FakeClock, settle, until } from "./test_fakes.ts";

function setUp() {
  const clock = new FakeClock();
  const events: ConsumerEvent[] = [];
  const measurements: ConsumerMeasurement[] = [];
  const retrier = new Retrier({
    clock,
    retryMaxDelayMs: 5_000,
    onEvent: (event) => events.push(event),
    onMeasurement: (measurement) => measurements.push(measurement),
  });
  return { clock, events, measurements, retrier };
}

Deno.test("Retrier.retry() retries until the call succeeds, reporting the outage once at each end", async () => {
  const { clock, events, measurements, retrier } = setUp();
  let calls = 0;
  let result: string | undefined;
  void retrier.retry(
    "postgres",
    () => ++calls < 3 ? Promise.reject(new Error("down")) : Promise.resolve("done"),
  )
    .then((value) => void (result = value));
  await until(clock, () => result !== undefined, "the call succeeding");
  assert.equal(result, "done");
  assert.equal(calls, 3);
  assert.deepEqual(events.map((e) => e.event), ["outage_started", "outage_ended"]);
  assert.deepEqual(measurements.map((m) => m.type === "call_failed" && m.dependency), [
    "postgres",
    "postgres",
  ]);
});

Deno.test("Retrier.retry() passes a FencedError on at once: an answer, not a failure", async () => {
  const { events, measurements, retrier } = setUp();
  let calls = 0;
  await assert.rejects(
    retrier.retry("redis", () => {
      calls++;
      return Promise.reject(new FencedError("c1"));
    }),
    FencedError,
  );
  assert.equal(calls, 1);
  assert.deepEqual(events, []);
  assert.deepEqual(measurements, []);
});

Deno.test("Retrier gives up an idle call at stop, and a finishing one only at the deadline", async () => {
  const { retrier } = setUp();
  const idle = retrier.retry("redis", () => new Promise(() => {}));
  const finishing = retrier.retry("postgres", () => new Promise(() => {}), { finishing: true });
  let finished = false;
  finishing.catch(() => void (finished = true));
  retrier.stop();
  assert.equal(retrier.stopping, true);
  await assert.rejects(idle, (error) => error instanceof Abandoned && !error.deadline);
  await settle();
  assert.equal(finished, false, "the finishing call still runs once stopping");
  retrier.passDeadline();
  await assert.rejects(finishing, (error) => error instanceof Abandoned && error.deadline);
  // Once given up, no call is even tried.
  let tried = false;
  await assert.rejects(
    retrier.retry("redis", () => Promise.resolve(void (tried = true)), { finishing: true }),
    Abandoned,
  );
  assert.equal(tried, false);
});

Deno.test("Retrier.within() rejects with a DeadlineError naming what it waited for, on its clock", async () => {
  const { clock, retrier } = setUp();
  let error: unknown;
  retrier.within(new Promise(() => {}), { ms: 2_000, what: "hand back" }).catch((e) => error = e);
  await until(clock, () => error !== undefined, "the bound");
  assert.ok(error instanceof DeadlineError);
  assert.match((error as Error).message, /^Cannot hand back: no answer within 2000 ms/);
  assert.equal(clock.now(), 2_000);
  assert.equal(await retrier.within(Promise.resolve(7), { ms: 1, what: "x" }), 7);
  assert.equal(clock.pending, 0);
});
