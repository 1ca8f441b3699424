import assert from "node:assert/strict";
import { formatCount, Progress } from "./progress.ts";

Deno.test("Progress stamps phases and steps with the seconds since it began", () => {
  const lines: string[] = [];
  let now = 1_000;
  const progress = new Progress((line) => lines.push(line), () => now);
  progress.phase("ingest");
  now += 12_345;
  progress.step("queue: 9,000 req/s");
  assert.deepEqual(lines, [
    "[   0.0 s] == ingest",
    "[  12.3 s]    queue: 9,000 req/s",
  ]);
  assert.equal(progress.elapsedSeconds, 12.345);
});

Deno.test("formatCount() rounds and groups thousands", () => {
  assert.equal(formatCount(1_234_567.8), "1,234,568");
  assert.equal(formatCount(12.2), "12");
});
