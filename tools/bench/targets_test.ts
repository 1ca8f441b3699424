import assert from "node:assert/strict";
import { emptyResults, quickResults, quickResultsWithComparisons } from "./testdata/fixtures.ts";
import { evaluateTargets } from "./targets.ts";

Deno.test("evaluateTargets() judges every target of the issue from a run's ratios", async () => {
  const results = await quickResults();
  const verdicts = evaluateTargets(results);
  assert.deepEqual(verdicts.map((v) => v.phase), [
    "Ingest",
    "Ingest",
    "Ingest",
    "Drain",
    "Drain",
    "End to end",
    "End to end",
    "Growth",
    "Growth",
  ]);
  // The captured quick run: queue mode at 65% of the reference, batch at 83% and 74× single.
  assert.deepEqual([0, 3, 4].map((i) => verdicts[i]!.met), [false, true, true]);
  assert.match(verdicts[0]!.measured, /^65% /);
  // Captured before the course and the baseline were measured.
  assert.deepEqual(verdicts.slice(1, 3).map((v) => [v.measured, v.met]), [
    ["not measured", undefined],
    ["not measured (run with --baseline REF)", undefined],
  ]);
  // Five-second rates cannot show drain ≥ ingest over 60 s.
  assert.equal(verdicts[5]!.met, undefined);
  assert.equal(verdicts[6]!.met, true);
});

Deno.test("evaluateTargets() marks what a run did not measure", () => {
  const verdicts = evaluateTargets(emptyResults());
  assert.equal(verdicts.length, 9);
  assert.ok(verdicts.every((v) => v.met === undefined && v.measured.startsWith("not measured")));
});

Deno.test("evaluateTargets() fails the ingest target below 85% and passes it above", async () => {
  const results = await quickResults();
  const at = (queueRatio: number) =>
    evaluateTargets({ ...results, ingest: { ...results.ingest!, queueRatio } })[0]!.met;
  assert.equal(at(0.84), false);
  assert.equal(at(0.86), true);
});

Deno.test("evaluateTargets() holds queue mode to ≥ 1.0× the course's producer", async () => {
  const at = async (course: number) =>
    evaluateTargets(await quickResultsWithComparisons({ course, baseline: 1 }))[1]!;
  const met = await at(1.25);
  assert.match(met.target, /≥ 1\.0× the course's producer's req\/s \(issue #10\)/);
  assert.match(met.measured, /^1\.25× \(median of 1 paired rounds\); API CPU [\d.]+ vs [\d.]+ µs/);
  assert.equal(met.met, true);
  assert.equal((await at(0.99)).met, false);
  assert.equal((await at(1)).met, true);
});

Deno.test("evaluateTargets() allows the previous build at most 5% more req/s", async () => {
  const at = async (baseline: number) =>
    evaluateTargets(await quickResultsWithComparisons({ course: 1, baseline }))[2]!;
  const met = await at(0.96);
  assert.match(met.target, /^ingest cost vs the previous build ≤ 5%: queue mode ≥ 0\.95×/);
  assert.match(met.measured, /^0\.96× .*; baseline 6019304$/);
  assert.equal(met.met, true);
  assert.equal((await at(0.95)).met, true);
  assert.equal((await at(0.94)).met, false);
});
