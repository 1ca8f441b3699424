import assert from "node:assert/strict";
import { ManualClock } from "./manual_clock.ts";

Deno.test("ManualClock fires a sleep only once its time passed, and no real time passes", async () => {
  const clock = new ManualClock(1_000);
  const started = Date.now();
  let woke = false;
  const sleeping = clock.sleep(60_000).then(() => woke = true);
  await clock.tick(59_999);
  assert.equal(woke, false);
  assert.equal(clock.now(), 60_999);
  await clock.tick(1);
  await sleeping;
  assert.equal(clock.now(), 61_000);
  assert.equal(clock.pending, 0);
  assert.ok(Date.now() - started < 1_000);
});

Deno.test("ManualClock.tick() fires the timers set by earlier ones when they fall due too", async () => {
  const clock = new ManualClock();
  const fired: number[] = [];
  void clock.sleep(10).then(() => {
    fired.push(clock.now());
    return clock.sleep(0);
  }).then(() => fired.push(clock.now()));
  await clock.tick(10);
  assert.deepEqual(fired, [10, 10]);
});

Deno.test("ManualClock ends a sleep at once when its signal aborts, holding no timer", async () => {
  const clock = new ManualClock();
  const stop = new AbortController();
  const sleeping = clock.sleep(5_000, stop.signal);
  assert.equal(clock.pending, 1);
  stop.abort();
  await sleeping;
  assert.equal(clock.pending, 0);
  assert.equal(clock.now(), 0);
  await clock.sleep(5_000, stop.signal);
});

Deno.test("ManualClock.every() ticks each period until cancelled", async () => {
  const clock = new ManualClock();
  let ticks = 0;
  const cancel = clock.every(100, () => ticks++);
  await clock.tick(350);
  assert.equal(ticks, 3);
  cancel();
  await clock.tick(1_000);
  assert.equal(ticks, 3);
  assert.equal(clock.pending, 0);
});

Deno.test("ManualClock.next() fires the earliest timer at once, false when none is left", () => {
  const clock = new ManualClock();
  const order: string[] = [];
  void clock.sleep(20);
  clock.every(5, () => order.push("tick"));
  assert.equal(clock.next(), true);
  assert.deepEqual(order, ["tick"]);
  assert.equal(clock.now(), 5);
  assert.equal(clock.next(4), false, "nothing due by then");
});
