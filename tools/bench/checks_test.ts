import assert from "node:assert/strict";
import { type Check, checkResults, checksSummary } from "./checks.ts";
import type { RateRun } from "./end_to_end.ts";
import type { BenchResults } from "./results.ts";
import { emptyResults, quickResults, quickResultsWithComparisons } from "./testdata/fixtures.ts";

function failed(checks: readonly Check[]): string[] {
  return checks.filter((c) => !c.ok).map((c) => `${c.phase}: ${c.rule}`);
}

/** The captured quick run with its last end-to-end rate changed by `change`. */
async function withRate(change: (run: RateRun) => RateRun): Promise<BenchResults> {
  const results = await quickResults();
  const runs = results.endToEnd!.runs;
  return {
    ...results,
    endToEnd: { ...results.endToEnd!, runs: [...runs.slice(0, -1), change(runs.at(-1)!)] },
  };
}

Deno.test("checkResults() holds every check of a captured clean quick run", async () => {
  const checks = checkResults(await quickResults());
  assert.deepEqual(failed(checks), []);
  assert.deepEqual(
    [...new Set(checks.map((c) => c.phase))],
    ["Ingest", "Traefik", "End to end", "Growth"],
  );
  assert.equal(checksSummary(checks), `all ${checks.length} checks held`);
});

Deno.test("checkResults() fails a rate whose stored rows differ from its 202s", async () => {
  const checks = checkResults(await withRate((run) => ({ ...run, stored: run.stored - 1 })));
  assert.deepEqual(failed(checks), ["End to end: 7350 req/s: stored = accepted"]);
  assert.match(checksSummary(checks), /^1 of \d+ checks FAILED: .*20852 stored, 20853 accepted/);
});

const E2E_ANSWERS =
  "End to end: 7350 req/s: every answer 202 or a 503 whose cause is recorded (below Traefik's ceiling: an unexplained 503 fails)";

/** A rate's 503s: `traefik` of Traefik's own, `full` the API counted, `unexplained` neither. */
function refused(run: RateRun, counts: { traefik?: number; full?: number; unexplained?: number }) {
  const { traefik = 0, full = 0, unexplained = 0 } = counts;
  const total = traefik + full + unexplained;
  return {
    ...run,
    load: { ...run.load, rejected: total },
    refusals: {
      total,
      traefik,
      api: { full, unavailable: 0, unconfirmed: 0 },
      unexplained,
    },
  };
}

Deno.test("checkResults() fails an answer that is neither 202 nor 503", async () => {
  const checks = checkResults(
    await withRate((run) => ({ ...run, load: { ...run.load, failed: 2 } })),
  );
  assert.deepEqual(failed(checks), [E2E_ANSWERS]);
});

Deno.test("checkResults() fails a 503 no record explains below Traefik's ceiling, sustained or not", async () => {
  for (const sustained of [true, false]) {
    const checks = checkResults(
      await withRate((run) => ({ ...refused(run, { unexplained: 1 }), sustained })),
    );
    assert.deepEqual(failed(checks), [E2E_ANSWERS]);
    assert.match(checks.find((c) => !c.ok)!.measured, / 1 × 503 \(.*, 1 unexplained\)/);
  }
});

Deno.test("checkResults() takes 503s whose cause is recorded: Traefik's own or the API's code", async () => {
  const checks = checkResults(await withRate((run) => refused(run, { traefik: 3, full: 4 })));
  assert.deepEqual(failed(checks), []);
  assert.match(
    checks.find((c) => c.rule === E2E_ANSWERS.slice("End to end: ".length))!.measured,
    /7 × 503 \(3 Traefik's own \(no replica ready\), 4 queue_full, /,
  );
});

Deno.test("checkResults() reports, without failing, an unexplained 503 at Traefik's ceiling", async () => {
  const results = await withRate((run) => refused(run, { unexplained: 2 }));
  const e2e = results.endToEnd!;
  // The quick run's one rate is half the ceiling: a ceiling of half as much puts it on top.
  const atCeiling = checkResults({ ...results, endToEnd: { ...e2e, ceiling: e2e.ceiling / 2 } });
  assert.deepEqual(failed(atCeiling), []);
  assert.ok(atCeiling.some((c) => /at the ceiling: unexplained 503s reported/.test(c.rule)));
});

Deno.test("checkResults() fails an overload run with an answer neither 202 nor 503", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const checks = checkResults({
    ...results,
    growth: {
      ...growth,
      overload: {
        ...growth.overload,
        load: { ...growth.overload.load, failed: 1 },
      },
    },
  });
  assert.equal(failed(checks).length, 1);
  assert.match(checks.find((c) => !c.ok)!.measured, /, 1 other or none$/);
});

Deno.test("checkResults() fails the traefik phase on a non-202 or a 202 not queued", async () => {
  const results = await quickResults();
  const traefik = results.traefik!;
  const [course] = traefik.runs.course;
  const checks = checkResults({
    ...results,
    traefik: {
      ...traefik,
      runs: { ...traefik.runs, course: [{ ...course!, accepted: course!.accepted - 2 }] },
    },
  });
  // Two answers missing: not every answer was a 202, and the list holds more than were counted.
  assert.deepEqual(failed(checks), [
    "Traefik: course: every answer 202 (oha)",
    "Traefik: course: every 202 kept (users queued = 202s counted)",
  ]);
});

Deno.test("checkResults() fails ingest on a non-202 answer or a 202 not kept", async () => {
  const results = await quickResults();
  const ingest = results.ingest!;
  const [queue] = ingest.runs.queue;
  const broken: BenchResults = {
    ...results,
    ingest: {
      ...ingest,
      runs: {
        ...ingest.runs,
        queue: [{ ...queue!, accepted: queue!.requests - 3, kept: queue!.requests - 100 }],
      },
    },
  };
  assert.deepEqual(failed(checkResults(broken)), [
    "Ingest: queue: every answer 202",
    "Ingest: queue: every 202 kept (users queued ≥ 202s counted)",
  ]);
});

Deno.test("checkResults() fails an overload that outgrew the bound or lost a 202", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const overload = (change: Partial<typeof growth.overload>) =>
    checkResults({
      ...results,
      growth: { ...growth, overload: { ...growth.overload, ...change } },
    });
  assert.deepEqual(failed(overload({ maxBacklog: growth.overload.maxLength + 1 })), [
    "Growth: overload: queue length ≤ QUEUE_MAX_LENGTH",
  ]);
  assert.deepEqual(failed(overload({ stored: growth.overload.load.accepted - 1 })), [
    "Growth: overload: stored = accepted",
  ]);
  assert.deepEqual(failed(overload({ stored: growth.overload.load.accepted })), []);
});

Deno.test("checkResults() fails an overload 503 the API did not count as queue_full", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const { refused } = growth.overload;
  const overload = (change: Partial<typeof refused>) =>
    checkResults({
      ...results,
      growth: {
        ...growth,
        overload: { ...growth.overload, refused: { ...refused, ...change } },
      },
    });
  const rule = "Growth: overload: every answer 202 or a 503 the API counted as queue_full";
  assert.deepEqual(failed(overload({ full: refused.full - 1 })), [rule]);
  assert.deepEqual(failed(overload({ full: refused.full - 1, unavailable: 1 })), [rule]);
  assert.deepEqual(failed(overload({})), []);
});

Deno.test("checkResults() has nothing to check in a run that measured nothing", () => {
  const checks = checkResults(emptyResults());
  assert.deepEqual(checks, []);
  assert.match(checksSummary(checks), /^nothing to check/);
});

Deno.test("checkResults() counts the course's list like the queue's", async () => {
  const results = await quickResultsWithComparisons();
  assert.deepEqual(failed(checkResults(results)), []);
  const rules = checkResults(results).filter((c) => c.phase === "Ingest").map((c) => c.rule)
    .filter((r) => r.startsWith("course"));
  assert.deepEqual(rules, [
    "course: every answer 202",
    "course: every 202 kept (users queued ≥ 202s counted)",
  ]);
  const ingest = results.ingest!;
  const [course] = ingest.runs.course!;
  const lost: BenchResults = {
    ...results,
    ingest: {
      ...ingest,
      runs: { ...ingest.runs, course: [{ ...course!, kept: course!.kept - 1 }] },
    },
  };
  assert.deepEqual(failed(checkResults(lost)), [
    "Ingest: course: every 202 kept (users queued ≥ 202s counted)",
  ]);
});
