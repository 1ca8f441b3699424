import assert from "node:assert/strict";
import { emptyResults, quickResults } from "./testdata/fixtures.ts";
import { evaluateTargets } from "./targets.ts";

Deno.test("evaluateTargets() judges every target of the issue from a run's ratios", async () => {
  const results = await quickResults();
  const verdicts = evaluateTargets(results);
  assert.deepEqual(verdicts.map((v) => v.phase), [
    "Ingest",
    "Drain",
    "Drain",
    "End to end",
    "End to end",
    "Growth",
    "Growth",
  ]);
  // The captured quick run: queue mode at 65% of the reference, batch at 83% and 74× single.
  assert.deepEqual(verdicts.slice(0, 3).map((v) => v.met), [false, true, true]);
  assert.match(verdicts[0]!.measured, /^65% /);
  // Five-second rates cannot show drain ≥ ingest over 60 s.
  assert.equal(verdicts[3]!.met, undefined);
  assert.equal(verdicts[4]!.met, true);
});

Deno.test("evaluateTargets() marks what a run did not measure", () => {
  const verdicts = evaluateTargets(emptyResults());
  assert.equal(verdicts.length, 7);
  assert.ok(verdicts.every((v) => v.met === undefined && v.measured === "not measured"));
});

Deno.test("evaluateTargets() fails the ingest target below 85% and passes it above", async () => {
  const results = await quickResults();
  const at = (queueRatio: number) =>
    evaluateTargets({ ...results, ingest: { ...results.ingest!, queueRatio } })[0]!.met;
  assert.equal(at(0.84), false);
  assert.equal(at(0.86), true);
});
