import assert from "node:assert/strict";
import { DeadlineError, withDeadline } from "./deadline.ts";

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
