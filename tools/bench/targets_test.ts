import assert from "node:assert/strict";
import { emptyResults, quickResults, quickResultsWithComparisons } from "./testdata/fixtures.ts";
import { evaluateTargets } from "./targets.ts";

Deno.test("evaluateTargets() judges every target of the issues from a run's ratios", async () => {
  const results = await quickResults();
  const verdicts = evaluateTargets(results);
  assert.deepEqual(verdicts.map((v) => v.phase), [
    "Ingest",
    "Ingest",
    "Traefik",
    "Drain",
    "Drain",
    "Drain",
    "End to end",
    "End to end",
    "End to end",
    "Growth",
    "Growth",
  ]);
  // The captured quick run: queue mode at 48% of the reference (CPU 1.92×), 0.56× the course
  // through Traefik; batch at 52% of the reference and 38× single; single 0.55× the course's.
  assert.deepEqual([0, 2, 3, 4, 5].map((i) => verdicts[i]!.met), [
    false,
    false,
    false,
    true,
    false,
  ]);
  assert.match(verdicts[0]!.measured, /^48% \(median of 1 paired rounds\); CPU 1\.92×/);
  assert.match(verdicts[2]!.measured, /^0\.56× \(median of 1 paired rounds\); CPU µs\/request/);
  assert.match(verdicts[5]!.measured, /^0\.55× \(1414 vs 2591 rows\/s\)/);
  // Five-second rates cannot show drain ≥ ingest over 60 s; one rate at half the ceiling does not
  // climb to it; its p99 is judged.
  assert.deepEqual([6, 7, 8].map((i) => verdicts[i]!.met), [undefined, undefined, true]);
  assert.match(verdicts[8]!.measured, /^93\.0 ms at 4700 req\/s \(not sustained\)$/);
});

Deno.test("evaluateTargets() marks what a run did not measure", () => {
  const verdicts = evaluateTargets(emptyResults());
  assert.equal(verdicts.length, 11);
  assert.ok(verdicts.every((v) => v.met === undefined && v.measured.startsWith("not measured")));
});

Deno.test("evaluateTargets() wants ingest at ≥ 95% of the reference and ≤ 1.10× its CPU", async () => {
  const results = await quickResults();
  const ingest = results.ingest!;
  // CPU per request equal to the reference's, so only the share decides.
  const at = (queueRatio: number, cpu = 1) =>
    evaluateTargets({
      ...results,
      ingest: {
        ...ingest,
        queueRatio,
        runs: {
          ...ingest.runs,
          queue: ingest.runs.reference.map((r) => ({ ...r, serverCores: r.serverCores * cpu })),
        },
      },
    })[0]!.met;
  assert.equal(at(0.94), false);
  assert.equal(at(0.96), true);
  assert.equal(at(0.96, 1.09), true);
  assert.equal(at(0.96, 1.11), false);
});

Deno.test("evaluateTargets() climbs to the ceiling with stored = accepted in a full ladder", async () => {
  const results = await quickResults();
  const e2e = results.endToEnd!;
  const [run] = e2e.runs;
  const ladder = (stored: number) =>
    evaluateTargets({
      ...results,
      endToEnd: {
        ...e2e,
        plan: { ...e2e.plan, fractions: [0.5, 1] },
        runs: [run!, { ...run!, offered: Math.round(e2e.ceiling), stored }],
      },
    })[7]!;
  assert.equal(ladder(run!.load.accepted).met, true);
  const lost = ladder(run!.load.accepted - 1);
  assert.equal(lost.met, false);
  assert.match(lost.measured, /stored ≠ accepted at \d+ req\/s/);
});

Deno.test("evaluateTargets() holds queue mode to ≥ 1.0× the course's producer", async () => {
  const at = async (course: number) =>
    evaluateTargets(await quickResultsWithComparisons({ course }))[1]!;
  const met = await at(1.25);
  assert.match(met.target, /≥ 1\.0× the course's producer's req\/s, directly \(issue #10\)/);
  assert.match(met.measured, /^1\.25× \(median of 1 paired rounds\); API CPU [\d.]+ vs [\d.]+ µs/);
  assert.equal(met.met, true);
  assert.equal((await at(0.99)).met, false);
  assert.equal((await at(1)).met, true);
});
