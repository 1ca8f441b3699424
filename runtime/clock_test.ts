import assert from "node:assert/strict";
import { after, systemClock } from "./clock.ts";
import { ManualClock } from "./manual_clock.ts";

Deno.test("systemClock.sleep() waits its time, or ends at once on abort holding no timer", async () => {
  const started = Date.now();
  await systemClock.sleep(20);
  assert.ok(Date.now() - started >= 15);
  const stop = new AbortController();
  const sleeping = systemClock.sleep(60_000, stop.signal);
  stop.abort();
  // The test's sanitizer fails it if the 60 s timer were still set.
  await sleeping;
  await systemClock.sleep(60_000, stop.signal);
});

Deno.test("systemClock.every() ticks until cancelled", async () => {
  let ticks = 0;
  const cancel = systemClock.every(5, () => ticks++);
  await systemClock.sleep(40);
  cancel();
  assert.ok(ticks >= 2, `${ticks} ticks`);
});

Deno.test("after() fires once at its time unless cancelled first", async () => {
  const clock = new ManualClock();
  const fired: number[] = [];
  after({ clock, ms: 100 }, () => fired.push(clock.now()));
  const cancel = after({ clock, ms: 50 }, () => fired.push(-1));
  cancel();
  await clock.tick(1_000);
  assert.deepEqual(fired, [100]);
  assert.equal(clock.pending, 0);
  // On real time too: a timer left set would fail the test's sanitizer.
  const real = Promise.withResolvers<void>();
  after({ clock: systemClock, ms: 5 }, real.resolve);
  await real.promise;
  after({ clock: systemClock, ms: 60_000 }, () => assert.fail("cancelled"))();
});
