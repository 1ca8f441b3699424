import assert from "node:assert/strict";
import { DeadlineError, SharedDeadline, withDeadline } from "./deadline.ts";

Deno.test("withDeadline() settles like the work when it is in time", async () => {
  assert.equal(await withDeadline(Promise.resolve(7), 1_000, "count"), 7);
  await assert.rejects(
    withDeadline(Promise.reject(new RangeError("bad")), 1_000, "count"),
    RangeError,
  );
});

Deno.test("withDeadline() rejects with a DeadlineError once the time ran out first", async () => {
  const started = Date.now();
  await assert.rejects(
    withDeadline(new Promise(() => {}), 20, "ping Redis"),
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
  await assert.rejects(withDeadline(promise, 1, "wait"), DeadlineError);
  // Unhandled, this would fail the test.
  reject(new Error("Command timed out"));
  await new Promise((resolve) => setTimeout(resolve, 0));
});

Deno.test("SharedDeadline settles each wait like its work when in time, and holds no timer after", async () => {
  const deadline = new SharedDeadline(1_000, "count");
  const waits = [deadline.race(Promise.resolve(1)), deadline.race(Promise.resolve(2))];
  const failed = deadline.race(Promise.reject(new RangeError("bad")));
  assert.equal(deadline.pending, 3);
  assert.deepEqual(await Promise.all(waits), [1, 2]);
  await assert.rejects(failed, RangeError);
  // Nothing pending: its one timer is cleared (the test's sanitizer would see a leak).
  assert.equal(deadline.pending, 0);
});

Deno.test("SharedDeadline rejects only the waits whose time ran out, each at its own bound", async () => {
  const deadline = new SharedDeadline(40, "ping Redis");
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
  assert.equal(deadline.pending, 1, "the later wait is still running");
  later.resolve("in time");
  assert.equal(await late, "in time");
  assert.equal(deadline.pending, 0);
});

Deno.test("SharedDeadline handles a rejection of work that came too late", async () => {
  const deadline = new SharedDeadline(1, "wait");
  const { promise, reject } = Promise.withResolvers<void>();
  await assert.rejects(deadline.race(promise), DeadlineError);
  reject(new Error("Command timed out"));
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(deadline.pending, 0);
});
