import assert from "node:assert/strict";
import { markdownTable, renderReport } from "./report.ts";
import type { BenchResults } from "./results.ts";

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
  const results: BenchResults = {
    run: {
      variant: "quick",
      startedAt: "2026-11-21T20:00:00.000Z",
      seconds: 90,
      cores: 2,
      loadBefore: 0.5,
      versions: { deno: "2.9.6" },
    },
    skipped: ["end to end (no traefik)"],
  };
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
