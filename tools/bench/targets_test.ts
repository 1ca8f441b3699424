import assert from "node:assert/strict";
import type { BenchResults } from "./results.ts";
import {
  bulkResult,
  emptyResults,
  quickResults,
  quickResultsWithComparisons,
} from "./testdata/fixtures.ts";
import type { CourseRateRun } from "./course_end_to_end.ts";
import {
  bulkVerdicts,
  courseEndToEndVerdict,
  drainVersusIngest,
  evaluateTargets,
} from "./targets.ts";

/** The verdict of the target at `index` for `results`. */
const verdict = (results: BenchResults, index: number) => evaluateTargets(results)[index]!;

Deno.test("evaluateTargets() judges every target from a run's ratios", async () => {
  const verdicts = evaluateTargets(await quickResults());
  assert.deepEqual(verdicts.map((v) => v.phase), [
    "Ingest",
    "Ingest",
    "Traefik",
    "Drain",
    "Drain",
    "Drain",
    "Drain vs ingest",
    "End to end",
    "End to end",
    "End to end",
    "Growth",
    "Growth",
    "Bulk",
    "Bulk",
    "Bulk",
    "Bulk",
  ]);
  // The captured quick run (on a busy machine): API + Redis CPU 1.30× the course's, 31% of the
  // HTTP floor, 0.84× the course through Traefik; batch at 36% of the drain floor and 118×
  // single; single 1.02× the course's; drain 24.1× ingest.
  assert.deepEqual(verdicts.slice(0, 7).map((v) => v.met), [
    false,
    false,
    false,
    false,
    true,
    true,
    true,
  ]);
  assert.match(verdicts[0]!.measured, /^1\.30× \(41\.2 vs 31\.6 µs, medians of 1 and 1 runs\)/);
  assert.match(verdicts[1]!.measured, /^31% \(median of 1 paired rounds\)$/);
  assert.match(verdicts[2]!.measured, /^0\.84× \(median of 1 paired rounds\); CPU µs\/request/);
  assert.match(verdicts[3]!.measured, /^36% \(33368 vs 92518 rows\/s\)$/);
  assert.match(verdicts[5]!.measured, /^1\.02× \(283 vs 278 rows\/s\)/);
  assert.match(verdicts[6]!.measured, /^24\.10× \(batch 1000 × 2: 54355 rows\/s; ingest × 2/);
  // One rate at an eighth of the ceiling neither climbs to it nor stands at half of it.
  assert.deepEqual([7, 8].map((i) => verdicts[i]!.met), [undefined, undefined]);
  assert.equal(verdicts[8]!.measured, "no run at half the ceiling");
});

Deno.test("evaluateTargets() judges the p99 at half the ceiling only at a sustained rate", async () => {
  const results = await quickResults();
  const e2e = results.endToEnd!;
  const at = (sustained: boolean, p99: number) => {
    // The captured run's one rate, standing for the one at half the ceiling.
    const run = e2e.runs.at(-1)!;
    const half = { ...run, sustained, latencyMs: { ...run.latencyMs, p99 } };
    return verdict({ ...results, endToEnd: { ...e2e, half } }, 8);
  };
  assert.match(
    at(true, 100).target,
    /p99 enqueue → stored ≤ 100 ms at half Traefik's ceiling, sustained$/,
  );
  assert.equal(at(true, 100).met, true);
  assert.match(at(true, 100).measured, /^100\.0 ms at \d+ req\/s \(sustained\)$/);
  assert.equal(at(true, 100.1).met, false);
  // A fast p99 at a rate the stack did not sustain meets nothing.
  assert.equal(at(false, 5).met, false);
});

Deno.test("evaluateTargets() marks what a run did not measure", () => {
  const verdicts = evaluateTargets(emptyResults());
  assert.equal(verdicts.length, 16);
  assert.ok(verdicts.every((v) => v.met === undefined && v.measured.startsWith("not measured")));
});

Deno.test("evaluateTargets() wants one API process at ≥ 70% of the HTTP floor's req/s", async () => {
  const results = await quickResults();
  const at = (queueRatio: number) =>
    verdict({ ...results, ingest: { ...results.ingest!, queueRatio } }, 1);
  assert.match(at(0.7).target, /≥ 70% of the HTTP floor's req\/s/);
  assert.equal(at(0.69).met, false);
  assert.equal(at(0.7).met, true);
});

Deno.test("evaluateTargets() holds the API's and Redis's CPU per request to ≤ 1.0× the course's", async () => {
  // The comparison fixture gives the course our CPU per request; `cost` scales the course's.
  const at = async (cost: number) => {
    const results = await quickResultsWithComparisons({ course: 1.25 });
    const ingest = results.ingest!;
    const course = ingest.runs.course.map((r) => ({
      ...r,
      serverCores: r.serverCores * cost,
      redisCores: r.redisCores * cost,
    }));
    return verdict({ ...results, ingest: { ...ingest, runs: { ...ingest.runs, course } } }, 0);
  };
  assert.equal((await at(1)).met, true);
  assert.equal((await at(1.1)).met, true);
  const costlier = await at(0.9);
  assert.equal(costlier.met, false);
  assert.match(costlier.measured, /^1\.11× .*; req\/s 1\.25× the course's$/);
});

Deno.test("evaluateTargets() wants batch 1000 × 1 at ≥ 90% of the drain floor", async () => {
  const results = await quickResults();
  const batch = results.drain!.batch.find((r) => r.batchSize === 1_000 && r.replicas === 1)!;
  const at = (share: number) =>
    verdict({
      ...results,
      drain: { ...results.drain!, floorRowsPerSecond: batch.rowsPerSecond / share },
    }, 3).met;
  assert.equal(at(0.89), false);
  assert.equal(at(0.91), true);
});

Deno.test("drainVersusIngest() compares the stack's drain with its ingest, each measured", async () => {
  const results = await quickResults();
  const traefik = results.traefik!;
  const at = (ingestRate: number) =>
    drainVersusIngest({
      ...results,
      traefik: {
        ...traefik,
        runs: {
          ...traefik.runs,
          queue: traefik.runs.queue.map((r) => ({ ...r, requestsPerSecond: ingestRate })),
        },
      },
    });
  const drain = results.drain!.batch.find((r) => r.batchSize === 1_000 && r.replicas === 2)!;
  assert.equal(at(drain.rowsPerSecond * 0.99).met, true);
  const behind = at(drain.rowsPerSecond * 1.01);
  assert.equal(behind.met, false);
  assert.match(behind.measured, /^0\.99× \(batch 1000 × 2: /);
  assert.equal(drainVersusIngest({ ...results, traefik: undefined }).met, undefined);
});

Deno.test("evaluateTargets() climbs to the ceiling with stored = accepted in a full ladder", async () => {
  const results = await quickResults();
  const e2e = results.endToEnd!;
  const [run] = e2e.runs;
  const ladder = (stored: number) =>
    verdict({
      ...results,
      endToEnd: {
        ...e2e,
        plan: { ...e2e.plan, fractions: [0.5, 1] },
        runs: [run!, { ...run!, offered: Math.round(e2e.ceiling), stored }],
      },
    }, 7);
  assert.equal(ladder(run!.load.accepted).met, true);
  const lost = ladder(run!.load.accepted - 1);
  assert.equal(lost.met, false);
  assert.match(lost.measured, /stored ≠ accepted at \d+ req\/s/);
});

Deno.test("courseEndToEndVerdict() wants ours ≥ 1.5× the course's design's highest sustained rate", async () => {
  const results = await quickResults();
  const e2e = results.endToEnd!;
  const run = e2e.runs[0]!;
  const courseRun = (offered: number, sustained: boolean, stored = run.load.accepted) =>
    ({ ...run, offered, sustained, stored }) as CourseRateRun;
  const judge = (ours: number, runs: CourseRateRun[]) =>
    courseEndToEndVerdict({
      ...results,
      endToEnd: {
        ...e2e,
        maxSustained: ours,
        course: {
          producers: 1,
          consumers: 1,
          runs,
          maxSustained: Math.max(0, ...runs.filter((r) => r.sustained).map((r) => r.offered)),
        },
      },
    });
  const met = judge(4_000, [courseRun(2_000, true), courseRun(4_000, false)]);
  assert.equal(met.met, true);
  assert.match(met.measured, /^2\.00× \(ours 4000 req\/s, the course's 2000 req\/s\)/);
  assert.equal(judge(2_000, [courseRun(2_000, true), courseRun(4_000, false)]).met, false);
  // Sustaining every rate run, the course's limit is above the ladder: nothing to judge.
  const above = judge(4_000, [courseRun(2_000, true)]);
  assert.equal(above.met, undefined);
  assert.match(above.measured, /not judged/);
  // Users the course's design lost are shown, not hidden (and not a failed check).
  const lost = judge(4_000, [
    courseRun(2_000, true, run.load.accepted - 3),
    courseRun(4_000, false),
  ]);
  assert.match(lost.measured, new RegExp(`2000: ${run.load.accepted - 3} of ${run.load.accepted}`));
  assert.equal(courseEndToEndVerdict({ ...results, endToEnd: { ...e2e } }).met, undefined);
});

Deno.test("bulkVerdicts() reads users/s and the pipeline's CPU per user at 100 per request", async () => {
  const results = await quickResults();
  const [speed, cpu] = bulkVerdicts({ ...results, bulk: bulkResult() });
  // 60,000 users/s against 2,000 req/s; 12 µs of pipeline CPU per user.
  assert.equal(speed!.met, true);
  assert.match(speed!.measured, /^30\.0× \(60000 users\/s vs 2000 req\/s\)$/);
  assert.equal(cpu!.met, true);
  assert.match(
    cpu!.measured,
    /^12\.0 µs \(traefik 4\.0 \+ api 3\.0 \+ redis 1\.0 \+ consumers 2\.0/,
  );
  const [slow] = bulkVerdicts({ ...results, bulk: bulkResult({ 1: 1_800, 100: 39_000 }) });
  assert.equal(slow!.met, false);
  const missing = bulkVerdicts({ ...results, bulk: bulkResult({ 1: 1_800, 10: 15_000 }) });
  assert.deepEqual(missing.map((v) => v.met), [undefined, undefined, undefined, undefined]);
  assert.deepEqual(bulkVerdicts(results).map((v) => v.measured), Array(4).fill("not measured"));
});

Deno.test("bulkVerdicts() wants the open model at 100 per request ≥ 25% of the drain floor, p99 ≤ 100 ms at half", async () => {
  const results = await quickResults();
  const floor = results.drain!.floorRowsPerSecond;
  const base = results.endToEnd!.runs[0]!;
  const rate = (offered: number, sustained: boolean, p99 = 40) => ({
    ...base,
    offered,
    sustained,
    usersPerRequest: 100,
    stored: base.load.accepted * 100,
    latencyMs: { ...base.latencyMs, p99 },
  });
  const judge = (maxSustainedRate: number, halfP99: number, from: BenchResults = results) => {
    const runs = [rate(maxSustainedRate, true), rate(maxSustainedRate * 2, false)];
    const bulk = {
      ...bulkResult(),
      open: {
        usersPerRequest: 100,
        closedLoopRequests: maxSustainedRate * 2,
        runs,
        maxSustainedUsers: maxSustainedRate * 100,
        half: rate(maxSustainedRate / 2, true, halfP99),
        queueMaxLength: 1e8,
        redisTimeoutMs: 1_000,
      },
    };
    return bulkVerdicts({ ...from, bulk }).slice(2);
  };
  // At exactly a quarter of the floor (in users/s), with the half-rate p99 at the bound: both met.
  const [share, p99] = judge(floor / 4 / 100, 100);
  assert.equal(share!.met, true);
  assert.match(share!.measured, /^25% \(/);
  assert.equal(p99!.met, true);
  const [low, slow] = judge(floor / 5 / 100, 101);
  assert.equal(low!.met, false);
  assert.equal(slow!.met, false);
  // Every rate sustained (the quick run's one rate): the limit lies above the ladder, not judged.
  const allSustained = bulkVerdicts({
    ...results,
    bulk: {
      ...bulkResult(),
      open: {
        usersPerRequest: 100,
        closedLoopRequests: 400,
        runs: [rate(100, true)],
        maxSustainedUsers: 10_000,
        queueMaxLength: 1e8,
        redisTimeoutMs: 1_000,
      },
    },
  })[2]!;
  assert.equal(allSustained.met, undefined);
  assert.match(allSustained.measured, /limit lies above the ladder/);
  // Without the drain phase there is no floor to read the share against.
  const { drain: _drain, ...noDrain } = results;
  const [unjudged] = judge(10, 10, noDrain);
  assert.equal(unjudged!.met, undefined);
  assert.equal(unjudged!.measured, "the drain floor not measured in this run");
});
