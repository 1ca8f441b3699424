import assert from "node:assert/strict";
import { type BenchResults, upgradeResults } from "./results.ts";
import { quickResults } from "./testdata/fixtures.ts";

Deno.test("upgradeResults() reads end-to-end runs that k6 drove into today's shape", async () => {
  const today = await quickResults();
  const e2e = today.endToEnd!;
  // As results.json stored them before oha: `k6` and `cores.k6`, no ceiling or fractions.
  const { ceiling: _c, ceilingSource: _s, generator: _g, ...older } = e2e;
  const legacy = {
    ...today,
    endToEnd: {
      ...older,
      plan: { seconds: 60, startRate: 250, maxRate: 16_000, servers: 2, consumers: 2 },
      runs: e2e.runs.map(({ load, cores: { generator, ...cores }, ...run }) => ({
        ...run,
        k6: load,
        cores: { ...cores, k6: generator },
      })),
    },
  } as unknown as BenchResults;
  const upgraded = upgradeResults(legacy).endToEnd!;
  assert.deepEqual(upgraded.runs, e2e.runs);
  assert.equal(upgraded.ceiling, Math.max(...e2e.runs.map((r) => r.offered)));
  assert.equal(upgraded.generator, "k6");
  assert.deepEqual(upgraded.plan.fractions, []);
  assert.equal(upgradeResults(today), today);
});
