import assert from "node:assert/strict";
import {
  abortable,
  DeadlineError,
  SharedDeadline,
  timeoutSignal,
  withDeadline,
} from "./deadline.ts";
import { ManualClock } from "./manual_clock.ts";

/** Records how `promise` settled, once it has, without waiting for it. */
function outcome(promise: Promise<unknown>): { value?: string } {
  const seen: { value?: string } = {};
  promise.then(
    (value) => seen.value = `resolved ${value}`,
    (error) => seen.value = `rejected ${error?.message ?? error}`,
  );
  return seen;
}

Deno.test("withDeadline() settles like the work when it is in time", async () => {
  assert.equal(await withDeadline(Promise.resolve(7), { ms: 1_000, what: "count" }), 7);
  await assert.rejects(
    withDeadline(Promise.reject(new RangeError("bad")), { ms: 1_000, what: "count" }),
    RangeError,
  );
});

Deno.test("withDeadline() rejects with a DeadlineError once the time ran out first", async () => {
  const started = Date.now();
  await assert.rejects(
    withDeadline(new Promise(() => {}), { ms: 20, what: "ping Redis" }),
    (error: unknown) => {
      assert.ok(error instanceof DeadlineError);
      assert.equal(error.message, "Cannot ping Redis: no answer within 20 ms");
      assert.equal(error.ms, 20);
      return true;
    },
  );
  assert.ok(Date.now() - started < 1_000);
});

Deno.test("withDeadline() handles a rejection of work that came too late", async () => {
  const { promise, reject } = Promise.withResolvers<void>();
  await assert.rejects(withDeadline(promise, { ms: 1, what: "wait" }), DeadlineError);
  // Unhandled, this would fail the test.
  reject(new Error("Command timed out"));
  await new Promise((resolve) => setTimeout(resolve, 0));
});

Deno.test("SharedDeadline settles each wait like its work when in time, and holds no timer after", async () => {
  const clock = new ManualClock();
  const deadline = new SharedDeadline({ ms: 1_000, what: "count", clock });
  const waits = [deadline.race(Promise.resolve(1)), deadline.race(Promise.resolve(2))];
  const failed = deadline.race(Promise.reject(new RangeError("bad")));
  assert.equal(clock.pending, 1, "one timer for the three waits");
  assert.deepEqual(await Promise.all(waits), [1, 2]);
  await assert.rejects(failed, RangeError);
  assert.equal(clock.pending, 0, "the timer is cancelled once nothing waits");
});

Deno.test("SharedDeadline rejects only the waits whose time ran out, each at its own bound", async () => {
  const deadline = new SharedDeadline({ ms: 40, what: "ping Redis" });
  const started = Date.now();
  const stuck = deadline.race(new Promise(() => {}));
  const answered = Promise.withResolvers<string>();
  const quick = deadline.race(answered.promise);
  await new Promise((resolve) => setTimeout(resolve, 20));
  // Began 20 ms after the first: still has time when the first expires.
  const later = Promise.withResolvers<string>();
  const late = deadline.race(later.promise);
  answered.resolve("ok");
  assert.equal(await quick, "ok");
  await assert.rejects(stuck, (error: unknown) => {
    assert.ok(error instanceof DeadlineError);
    assert.equal(error.message, "Cannot ping Redis: no answer within 40 ms");
    return true;
  });
  assert.ok(Date.now() - started >= 40);
  later.resolve("in time");
  // Its own bound had 20 ms left; the test's sanitizer fails on a timer left behind.
  assert.equal(await late, "in time");
});

Deno.test("SharedDeadline handles a rejection of work that came too late", async () => {
  const deadline = new SharedDeadline({ ms: 1, what: "wait" });
  const { promise, reject } = Promise.withResolvers<void>();
  await assert.rejects(deadline.race(promise), DeadlineError);
  // Unhandled, this would fail the test.
  reject(new Error("Command timed out"));
  await new Promise((resolve) => setTimeout(resolve, 0));
});

Deno.test("timeoutSignal() aborts with its reason once its time passed on the clock, not before", async () => {
  const clock = new ManualClock();
  const bound = timeoutSignal(100, { clock, reason: () => new RangeError("late") });
  await clock.tick(99);
  assert.equal(bound.signal.aborted, false);
  await clock.tick(1);
  assert.equal(bound.signal.aborted, true);
  assert.ok(bound.signal.reason instanceof RangeError);
  assert.equal(clock.pending, 0);
});

Deno.test("timeoutSignal() aborts with a TimeoutError by default, as AbortSignal.timeout does", async () => {
  const clock = new ManualClock();
  const bound = timeoutSignal(5, { clock });
  await clock.tick(5);
  assert.equal(bound.signal.reason.name, "TimeoutError");
});

Deno.test("timeoutSignal() holds no timer once disposed, and none at all for Infinity", async () => {
  const clock = new ManualClock();
  {
    using bound = timeoutSignal(1_000, { clock });
    assert.equal(clock.pending, 1);
    assert.equal(bound.signal.aborted, false);
  }
  assert.equal(clock.pending, 0);
  await clock.tick(2_000);
  using forever = timeoutSignal(Infinity, { clock });
  assert.equal(clock.pending, 0);
  assert.equal(forever.signal.aborted, false);
  // On real time too: a disposed 60 s timer would fail the test's sanitizer.
  using real = timeoutSignal(60_000);
  assert.equal(real.signal.aborted, false);
});

Deno.test("timeoutSignal() aborts two turns after its time, so what settles meanwhile wins", async () => {
  const clock = new ManualClock();
  const bound = timeoutSignal(100, { clock });
  const reply = Promise.withResolvers<string>();
  const seen = outcome(abortable(reply.promise, bound.signal));
  // The process was stalled past the bound: the expired timer runs first…
  clock.next();
  // …and the reply that arrived meanwhile is taken in the same turn.
  reply.resolve("OK");
  await clock.tick(0);
  assert.equal(bound.signal.aborted, true);
  assert.equal(seen.value, "resolved OK");
});

Deno.test("abortable() settles like the work unless its signal aborts first", async () => {
  const never = new Promise<number>(() => {});
  const stop = new AbortController();
  assert.equal(await abortable(Promise.resolve(3), stop.signal), 3);
  await assert.rejects(abortable(Promise.reject(new RangeError("bad")), stop.signal), RangeError);
  const waiting = abortable(never, stop.signal);
  stop.abort(new TypeError("stopped"));
  await assert.rejects(waiting, TypeError);
  await assert.rejects(abortable(never, stop.signal), TypeError, "already aborted: at once");
  const late = Promise.withResolvers<void>();
  await assert.rejects(abortable(late.promise, stop.signal), TypeError);
  // Unhandled, this would fail the test.
  late.reject(new Error("Command timed out"));
  await new Promise((resolve) => setTimeout(resolve, 0));
});

Deno.test("withDeadline() bounds a wait on the clock it is given, with no real waiting", async () => {
  const clock = new ManualClock();
  const seen = outcome(
    withDeadline(new Promise(() => {}), { ms: 20_000, what: "hand back", clock }),
  );
  await clock.tick(19_999);
  assert.equal(seen.value, undefined);
  await clock.tick(1);
  assert.equal(seen.value, "rejected Cannot hand back: no answer within 20000 ms");
  const answered = withDeadline(Promise.resolve("done"), { ms: 20_000, what: "hand back", clock });
  assert.equal(await answered, "done");
  assert.equal(clock.pending, 0, "the bound of an answered wait is cancelled");
});

Deno.test("SharedDeadline bounds its waits on the clock it is given, one timer for all", async () => {
  const clock = new ManualClock();
  const deadline = new SharedDeadline({ ms: 100, what: "accept the user", clock });
  const first = outcome(deadline.race(new Promise(() => {})));
  await clock.tick(60);
  const second = outcome(deadline.race(new Promise(() => {})));
  assert.equal(clock.pending, 1, "one timer for both waits");
  await clock.tick(40);
  assert.equal(first.value, "rejected Cannot accept the user: no answer within 100 ms");
  assert.equal(second.value, undefined);
  await clock.tick(60);
  assert.equal(second.value, "rejected Cannot accept the user: no answer within 100 ms");
  assert.equal(clock.pending, 0);
});

Deno.test("SharedDeadline takes a reply that came in the turn its bound expired", async () => {
  const clock = new ManualClock();
  const deadline = new SharedDeadline({ ms: 100, what: "accept the user", clock });
  const reply = Promise.withResolvers<string>();
  const seen = outcome(deadline.race(reply.promise));
  clock.next();
  reply.resolve("OK");
  await clock.tick(0);
  assert.equal(seen.value, "resolved OK");
  assert.equal(clock.pending, 0);
});
