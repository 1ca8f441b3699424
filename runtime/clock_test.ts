import assert from "node:assert/strict";
import { systemClock } from "./clock.ts";

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
