import assert from "node:assert/strict";
import { accepted, formatAge, formatRate, rates, type Snapshot } from "./rates.js";

function snapshot(at: number, fields: Partial<Snapshot> = {}): Snapshot {
  return { at, stored: 0, queued: 0, retry: 0, processing: 0, dead: 0, consumers: {}, ...fields };
}

Deno.test("accepted() counts a user wherever it is: stored or in any state of the queue", () => {
  assert.equal(
    accepted(snapshot(0, { stored: 1, queued: 2, retry: 3, processing: 4, dead: 5 })),
    15,
  );
});

Deno.test("rates() derives ingest from the accepted sum and stored from the stored counter", () => {
  const before = snapshot(1_000, { stored: 100, queued: 50, consumers: { a: 60, b: 40 } });
  const after = snapshot(3_000, {
    stored: 300,
    queued: 250,
    processing: 100,
    consumers: { a: 160, b: 140 },
  });
  assert.deepEqual(rates(before, after), { ingest: 250, stored: 100, consumers: { a: 50, b: 50 } });
});

Deno.test("rates() moves nothing between states into the ingest rate", () => {
  const before = snapshot(0, { queued: 100 });
  const after = snapshot(1_000, { queued: 10, processing: 40, stored: 50 });
  assert.equal(rates(before, after)?.ingest, 0);
});

Deno.test("rates() never goes below 0 and leaves out consumers that are new", () => {
  const before = snapshot(0, { dead: 10, consumers: { a: 500 } });
  const after = snapshot(1_000, { consumers: { a: 0, b: 20 } });
  assert.deepEqual(rates(before, after), { ingest: 0, stored: 0, consumers: { a: 0 } });
});

Deno.test("rates() is undefined when no time passed", () => {
  assert.equal(rates(snapshot(5), snapshot(5)), undefined);
  assert.equal(rates(snapshot(5), snapshot(4)), undefined);
});

Deno.test("formatAge() reads as ms, s, min or h", () => {
  assert.deepEqual([0, 850, 12_400, 185_000, 7_500_000].map(formatAge), [
    "0 ms",
    "850 ms",
    "12.4 s",
    "3 min 5 s",
    "2 h 5 min",
  ]);
});

Deno.test("formatRate() keeps a decimal below 10 and groups thousands", () => {
  assert.deepEqual([0, 4.54, 12.6, 1234.4].map(formatRate), ["0", "4.5", "13", "1,234"]);
});
