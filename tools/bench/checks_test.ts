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
  assert.deepEqual(failed(checks), ["End to end: 4700 req/s: stored = accepted"]);
  assert.match(checksSummary(checks), /^1 of \d+ checks FAILED: .*12397 stored, 12398 accepted/);
});

Deno.test("checkResults() fails an answer that is neither 202 nor 503", async () => {
  const checks = checkResults(
    await withRate((run) => ({ ...run, load: { ...run.load, failed: 2 } })),
  );
  assert.deepEqual(failed(checks), [
    "End to end: 4700 req/s: every answer 202 or 503 (not sustained: 503 sheds load)",
  ]);
});

Deno.test("checkResults() expects a 503 only at a rate that was not sustained", async () => {
  const shed = (sustained: boolean) =>
    withRate((run) => ({ ...run, sustained, load: { ...run.load, rejected: 5 } }));
  assert.equal(failed(checkResults(await shed(true))).length, 1);
  assert.deepEqual(failed(checkResults(await shed(false))), []);
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
