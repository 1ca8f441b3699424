import assert from "node:assert/strict";
import { markdownTable, renderReport } from "./report.ts";
import {
  bulkResult,
  emptyResults,
  quickResults,
  quickResultsWithComparisons,
} from "./testdata/fixtures.ts";
import { evaluateTargets } from "./targets.ts";

Deno.test("markdownTable() aligns columns and escapes pipes and line breaks", () => {
  assert.equal(
    markdownTable(["Setup", "rows/s"], [["batch | 1000", 5], ["two\nlines", 12]], [
      "left",
      "right",
    ]),
    [
      "| Setup | rows/s |",
      "| --- | ---: |",
      "| batch \\| 1000 | 5 |",
      "| two lines | 12 |",
    ].join("\n"),
  );
});

Deno.test("renderReport() lists the targets and the phases that ran", () => {
  const results = emptyResults(["end to end (no traefik)"]);
  const report = renderReport(results, [
    { phase: "Ingest", target: "queue ≥ 85%", measured: "91%", met: true },
    { phase: "Drain", target: "batch ≥ 60%", measured: "not measured", met: undefined },
  ]);
  assert.match(report, /^# Benchmark: .*\(quick run\)/);
  assert.match(report, /\| Ingest \| queue ≥ 85% \| 91% \| \*\*met\*\* \|/);
  assert.match(report, /\| Drain \| batch ≥ 60% \| not measured \| not evaluated \|/);
  assert.match(report, /Skipped: end to end \(no traefik\)\./);
  assert.doesNotMatch(report, /## 1\. Ingest/);
});

Deno.test("renderReport() says every 202 was kept only when the counts say so", async () => {
  const results = await quickResults();
  const ingest = results.ingest!;
  const [queue] = ingest.runs.queue;
  assert.match(renderReport(results, []), /Every 202 was kept: .* = 34669\/34669\./);
  assert.match(renderReport(results, []), /All \d+ checks held/);
  const lost = renderReport({
    ...results,
    ingest: { ...ingest, runs: { ...ingest.runs, queue: [{ ...queue!, kept: 10 }] } },
  }, []);
  assert.doesNotMatch(lost, /Every 202 was kept/);
  assert.match(lost, /\*\*1 of 1 queue-mode runs kept fewer users than were answered 202\*\*/);
  assert.match(lost, /\*\*1 of \d+ checks failed\*\*/);
  assert.match(
    lost,
    /\| Ingest \| queue: every 202 kept .* \| 10 queued \/ 34669 \| \*\*FAILED\*\* \|/,
  );
});

Deno.test("renderReport() says both lists through Traefik held every 202 only when the counts say so", async () => {
  const results = await quickResults();
  const traefik = results.traefik!;
  assert.match(
    renderReport(results, []),
    /every 202 was queued \(users queued \/ 202s counted, by round: our API's 6,836\/6,836; the course's 8,205\/8,205\)\./,
  );
  const [queue] = traefik.runs.queue;
  const lost = renderReport({
    ...results,
    traefik: { ...traefik, runs: { ...traefik.runs, queue: [{ ...queue!, kept: 6_000 }] } },
  }, []);
  assert.doesNotMatch(lost, /every 202 was queued/);
  assert.match(
    lost,
    /\*\*1 of 2 runs left their list holding other than the 202s counted\*\* \(users queued \/ 202s counted, by round: our API's 6,000\/6,836;/,
  );
  assert.match(
    lost,
    /\| Traefik \| queue: every 202 kept \(users queued = 202s counted\) \| 6000 queued \/ 6836 .*\| \*\*FAILED\*\* \|/,
  );
});

Deno.test("renderReport() puts the course in the ingest tables", async () => {
  const report = renderReport(await quickResultsWithComparisons(), []);
  assert.match(report, /the 5 servers take turns/);
  assert.match(
    report,
    /\| the course's producer \(`course_producer\.ts`: LPUSH, nothing else\) \| [\d,]+ \|/,
  );
  assert.match(
    report,
    /\| Round \| floor req\/s \| queue req\/s \| queue\/floor \| course req\/s \| course\/floor \| no_redis req\/s \| no_redis\/floor \| direct req\/s \| direct\/floor \|/,
  );
  // Queue ÷ each, with CPU per request of the API and of Redis side by side.
  assert.match(
    report,
    /\| the course's producer \| [\d,]+ \| 1\.25× \| ([\d.]+) vs \1 \| ([\d.]+) vs \2 \| 1\.00× \|/,
  );
  assert.match(report, /It runs directly here; section 1b measures it behind Traefik\./);
  // Their every-202-kept checks sit with the others.
  assert.match(report, /\| Ingest \| course: every 202 kept \(users queued = 202s counted\) \|/);
});

Deno.test("renderReport() leaves out what a run without the traefik phase lacks", async () => {
  const { traefik: _traefik, ...results } = await quickResults();
  const report = renderReport(results, []);
  assert.doesNotMatch(report, /## 1b\./);
  assert.doesNotMatch(report, /## Capacity model/);
});

Deno.test("renderReport() compares with the course through Traefik, in the drain and per process", async () => {
  const results = await quickResults();
  const report = renderReport(results, []);
  assert.match(report, /## 1b\. Ingest through Traefik/);
  assert.match(
    report,
    /\| Traefik's ceiling: the HTTP floor × 2 \| [\d,]+ \| 100% \|/,
  );
  assert.match(report, /\| the course's consumer \| 1,000 \| [\d.]+ \| [\d,]+ \|/);
  assert.match(report, /Single mode stored [\d.]+× its rows\/s/);
  assert.match(
    report,
    /\| \*\*total per user\*\* \| [\d.]+ \| [\d.]+ \| [\d.]+ \|/,
  );
});

Deno.test("renderReport() has the capacity model when the run measured its costs", async () => {
  const report = renderReport(await quickResults(), []);
  assert.match(report, /## Capacity model\n\n!\[capacity\]\(capacity\.svg\)/);
  assert.match(report, /\| 1,000,000 \| [\d,.]+ \| \d+ \| \d+ \(\d+, \d+\) \| \d+ \|/);
  assert.match(report, /Assumptions: /);
});

Deno.test("renderReport() gives each end-to-end rate's 503s by cause", async () => {
  const results = await quickResults();
  const e2e = results.endToEnd!;
  const [run] = e2e.runs;
  assert.match(renderReport(results, []), /\| 503s by cause \|/);
  const refused = renderReport({
    ...results,
    endToEnd: {
      ...e2e,
      runs: [{
        ...run!,
        load: { ...run!.load, rejected: 6 },
        refusals: {
          total: 6,
          traefik: 2,
          api: { full: 0, unavailable: 3, unconfirmed: 0 },
          unexplained: 1,
        },
      }],
    },
  }, []);
  assert.match(
    refused,
    /\| Traefik 2, full 0, unavailable 3, unconfirmed 0, unexplained 1 \|/,
  );
  assert.match(refused, /\*\*1 of \d+ checks failed\*\*/);
});

Deno.test("renderReport() reads the drain against the drain floor over a consumer's connections", async () => {
  const report = renderReport(await quickResults(), []);
  assert.match(report, /\| drain floor \(before\) \| 20,000 \|/);
  assert.match(report, /\| drain floor \(after\) \| 20,000 \|/);
  assert.match(
    report,
    /over 2 warmed-up connections as a consumer opens, once with each of 1, 2, 3, 4 statements in flight, keeping the fastest \(\d and \d in flight here\)/,
  );
  assert.match(report, /\| the HTTP floor \(`http_floor\.ts`/);
});

Deno.test("renderReport() has the bulk phase's users/s and CPU per user by tier", async () => {
  const results = { ...await quickResults(), bulk: bulkResult() };
  const report = renderReport(results, evaluateTargets(results));
  assert.match(report, /## 5\. Bulk: many users per request/);
  assert.match(report, /\| batch of 100 +\| +60,000 \|/);
  assert.match(report, /\| pipeline \|/);
});

Deno.test("renderReport() adds the capacity model at 100 users per request when the bulk phase ran", async () => {
  const results = await quickResults();
  const without = renderReport(results, evaluateTargets(results));
  assert.doesNotMatch(without, /### At 100 users per request/);
  const withBulk = { ...results, bulk: bulkResult() };
  const report = renderReport(withBulk, evaluateTargets(withBulk));
  assert.match(report, /### At 100 users per request/);
  assert.match(report, /All tiers: 12\.0 µs of CPU per user\./);
});
