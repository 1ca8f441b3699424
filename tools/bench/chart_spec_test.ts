import assert from "node:assert/strict";
import { capacityChartSpec, chartSpec, ratioRows, renderSvg } from "./chart_spec.ts";
import { capacityInputs, capacityModel } from "./capacity.ts";
import { bulkResult, quickResults, quickResultsWithComparisons } from "./testdata/fixtures.ts";

Deno.test("ratioRows() puts each figure next to its floor, with the targets", async () => {
  const results = await quickResults();
  const rows = ratioRows(results);
  assert.deepEqual(rows.map((r) => r.label), [
    "ingest: our API",
    "ingest: course's producer",
    "ingest: our app without Redis (diagnostic)",
    "ingest: direct mode",
    "Traefik: our API × 2",
    "Traefik: course's producer × 1",
    "drain: single",
    "drain: the course's consumer",
    "drain: batch 100 × 1",
    "drain: batch 1000 × 1",
    "drain: batch 5000 × 1",
    "drain: batch 100 × 2",
    "drain: batch 1000 × 2",
    "drain: batch 5000 × 2",
  ]);
  assert.equal(rows[0]?.ratio, results.ingest?.queueRatio);
  assert.deepEqual(rows.filter((r) => r.target !== undefined).map((r) => r.target), [0.7, 0.9]);
  // The Traefik rows are shares of Traefik's ceiling: ours over the course's is the paired ratio.
  const traefik = results.traefik!;
  assert.equal(rows[4]?.ratio, traefik.ceilingRatio);
  assert.ok(Math.abs(rows[4]!.ratio / rows[5]!.ratio - traefik.courseRatio) < 1e-9);
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
  assert.match(svg, /ingest: our API/);
  assert.match(svg, /Enqueue → stored latency/);
  assert.match(svg, /<\/svg>$/);
});

Deno.test("ratioRows() adds the course's producer when measured", async () => {
  const rows = ratioRows(await quickResultsWithComparisons({ course: 1.25 }));
  assert.deepEqual(rows.slice(0, 2).map((r) => r.label), [
    "ingest: our API",
    "ingest: course's producer",
  ]);
  // On the floor's scale: queue's bar is 1.25× the course's.
  assert.ok(Math.abs(rows[0]!.ratio / rows[1]!.ratio - 1.25) < 1e-9);
  assert.deepEqual(rows.slice(1, 3).map((r) => r.target), [undefined, undefined]);
  const svg = await renderSvg(chartSpec(await quickResultsWithComparisons()));
  assert.match(svg, /ingest: course&#39;s producer|ingest: course's producer/);
});

Deno.test("capacityChartSpec() draws one line per tier and the target rates, headless", async () => {
  const model = capacityModel(capacityInputs(await quickResults())!);
  const svg = await renderSvg(capacityChartSpec(model, "Capacity model"));
  assert.match(svg, /^<svg /);
  for (const tier of ["traefik", "api", "redis", "consumer", "postgres"]) {
    assert.match(svg, new RegExp(`>${tier}<`));
  }
  assert.match(svg, /1,000,000\/s/);
});

Deno.test("chartSpec() draws the bulk phase's users/s and CPU per user by tier, headless", async () => {
  const results = { ...await quickResults(), bulk: bulkResult() };
  const panels = (chartSpec(results) as unknown as { vconcat: unknown[] }).vconcat;
  assert.equal(panels.length, 6);
  const svg = await renderSvg(chartSpec(results));
  assert.match(svg, /Bulk through Traefik/);
  assert.match(svg, /batch of 100/);
});
