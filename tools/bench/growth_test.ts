import assert from "node:assert/strict";
import { secondHalfSpread } from "./growth.ts";

Deno.test("secondHalfSpread() reads the drain's second half by rows taken, not by sampling time", () => {
  // Three seconds before the drain (start, warm-up, preload), then a short drain whose heap
  // grows in its first half and stays flat in its second.
  const samples = [
    ...[0, 1_000, 2_000, 3_000].map((ms) => ({ ms, mib: 90, done: 0 })),
    { ms: 3_250, mib: 120, done: 100_000 },
    { ms: 3_500, mib: 170, done: 300_000 },
    { ms: 3_750, mib: 205, done: 500_000 },
    { ms: 4_000, mib: 210, done: 700_000 },
    { ms: 4_250, mib: 208, done: 1_000_000 },
  ];
  assert.equal(secondHalfSpread(samples), 210 / 205);
});

Deno.test("secondHalfSpread() catches growth in the drain's second half", () => {
  const samples = [
    { ms: 0, mib: 90, done: 0 },
    { ms: 1_000, mib: 150, done: 500_000 },
    { ms: 2_000, mib: 200, done: 750_000 },
    { ms: 3_000, mib: 250, done: 1_000_000 },
  ];
  assert.equal(secondHalfSpread(samples), 250 / 150);
});

Deno.test("secondHalfSpread() falls back to the second half of the time without a row count", () => {
  const samples = [0, 1_000, 2_000, 3_000].map((ms, i) => ({ ms, mib: [50, 100, 110, 100][i]! }));
  assert.equal(secondHalfSpread(samples), 1.1);
});
