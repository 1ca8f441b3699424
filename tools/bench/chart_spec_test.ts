import assert from "node:assert/strict";
import { chartSpec, ratioRows, renderSvg } from "./chart_spec.ts";
import { quickResults, quickResultsWithComparisons } from "./testdata/fixtures.ts";

Deno.test("ratioRows() puts each figure next to its reference, with the targets", async () => {
  const results = await quickResults();
  const rows = ratioRows(results);
  assert.deepEqual(rows.map((r) => r.label), [
    "ingest: queue mode",
    "ingest: direct mode",
    "drain: single",
    "drain: batch 100 × 1",
    "drain: batch 1000 × 1",
    "drain: batch 5000 × 1",
    "drain: batch 100 × 2",
    "drain: batch 1000 × 2",
    "drain: batch 5000 × 2",
  ]);
  assert.equal(rows[0]?.ratio, results.ingest?.queueRatio);
  assert.deepEqual(rows.filter((r) => r.target !== undefined).map((r) => r.target), [0.85, 0.6]);
});

Deno.test("chartSpec() has one panel per kind of figure, and none without data", async () => {
  const results = await quickResults();
  const panels = (spec: unknown) => (spec as { vconcat: unknown[] }).vconcat.length;
  assert.equal(panels(chartSpec(results)), 4);
  const { endToEnd: _e2e, growth: _growth, ...onlyRatios } = results;
  assert.equal(panels(chartSpec(onlyRatios)), 1);
});

Deno.test("renderSvg() renders the chart headless, labels included", async () => {
  const svg = await renderSvg(chartSpec(await quickResults()));
  assert.match(svg, /^<svg /);
  assert.match(svg, /ingest: queue mode/);
  assert.match(svg, /Enqueue → stored latency/);
  assert.match(svg, /<\/svg>$/);
});

Deno.test("ratioRows() adds the previous build and the course's producer when measured", async () => {
  const rows = ratioRows(await quickResultsWithComparisons({ course: 1.25, baseline: 0.98 }));
  assert.deepEqual(rows.slice(0, 4).map((r) => r.label), [
    "ingest: queue mode",
    "ingest: previous build 6019304",
    "ingest: course's producer",
    "ingest: direct mode",
  ]);
  // On the reference's scale: queue's bar is 1.25× the course's and 0.98× the previous build's.
  assert.ok(Math.abs(rows[0]!.ratio / rows[2]!.ratio - 1.25) < 1e-9);
  assert.ok(Math.abs(rows[0]!.ratio / rows[1]!.ratio - 0.98) < 1e-9);
  assert.deepEqual(rows.slice(1, 4).map((r) => r.target), [undefined, undefined, undefined]);
  const svg = await renderSvg(chartSpec(await quickResultsWithComparisons()));
  assert.match(svg, /ingest: course&#39;s producer|ingest: course's producer/);
});
