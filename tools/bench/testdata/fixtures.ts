/**
 * Results the benchmark's unit tests start from: a real quick run's
 * results.json, and a run that measured nothing.
 *
 * @module
 */

import type { BulkResult, BulkRun } from "../bulk.ts";
import type { BenchResults } from "../results.ts";

/** The results.json of a real quick run (every phase, every check held). */
export async function quickResults(): Promise<BenchResults> {
  const url = new URL("./results_quick.json", import.meta.url);
  return JSON.parse(await Deno.readTextFile(url));
}

/** A quick run in which no phase ran. */
export function emptyResults(skipped: readonly string[] = []): BenchResults {
  return {
    run: {
      variant: "quick",
      startedAt: "2026-11-21T20:00:00.000Z",
      seconds: 90,
      cores: 2,
      loadBefore: 0.5,
      versions: { deno: "2.9.6" },
    },
    skipped,
  };
}

/**
 * The captured quick run with course runs made from its queue runs: each
 * req/s divided by `course` (so that is queue's ratio to it), CPU per request
 * the same, every user kept.
 */
export async function quickResultsWithComparisons(
  ratios: { course: number } = { course: 1.25 },
): Promise<BenchResults> {
  const results = await quickResults();
  const ingest = results.ingest!;
  const scaled = (ratio: number) =>
    ingest.runs.queue.map((run) => ({
      ...run,
      requestsPerSecond: run.requestsPerSecond / ratio,
      requests: Math.round(run.requests / ratio),
      accepted: Math.round(run.requests / ratio),
      kept: Math.round(run.requests / ratio),
      serverCores: run.serverCores / ratio,
      redisCores: run.redisCores / ratio,
    }));
  return {
    ...results,
    ingest: {
      ...ingest,
      runs: { ...ingest.runs, course: scaled(ratios.course) },
      courseRatio: ratios.course,
    },
  };
}

/**
 * A bulk phase's results, made up: POST /users at 2,000 req/s, batches at
 * `usersPerSecond` each, every user stored, each tier's CPU per user as given
 * (the pipeline's at 100 per request: 4 + 3 + 1 + 2 + 2 = 12 µs).
 */
export function bulkResult(
  usersPerSecond: Readonly<Record<number, number>> = { 1: 1_800, 10: 15_000, 100: 60_000 },
): BulkResult {
  const run = (path: BulkRun["path"], users: number, perSecond: number, scale: number) => {
    const seconds = 3;
    const requests = Math.round(perSecond * seconds / users);
    return {
      path,
      usersPerRequest: users,
      load: {
        requests,
        accepted: requests,
        rejected: 0,
        failed: 0,
        dropped: 0,
        seconds,
        latencyMs: { p50: 20, p90: 30, p99: 40 },
        slowestMs: 50,
        cpuSeconds: 0.1,
      },
      requestsPerSecond: requests / seconds,
      usersPerSecond: requests * users / seconds,
      acceptedUsers: requests * users,
      stored: requests * users,
      seconds: seconds + 0.5,
      microsPerUser: {
        traefik: 4 * scale,
        api: 3 * scale,
        redis: 1 * scale,
        consumers: 2,
        postgres: 2,
        generator: 1 * scale,
      },
      machineCores: 1.9,
      connections: 64,
      refused: { full: 0, unavailable: 0, unconfirmed: 0 },
    };
  };
  const plan = {
    seconds: 3,
    warmupSeconds: 1,
    connections: 64,
    usersPerRequest: Object.keys(usersPerSecond).map(Number),
    servers: 2,
    consumers: 2,
    profileSeconds: 0,
    openFractions: [],
    openSeconds: 0,
  };
  return {
    plan,
    generator: "oha 1.16.0",
    single: run("/users", 1, 2_000, 100),
    batches: plan.usersPerRequest.map((users) =>
      run("/users/batch", users, usersPerSecond[users]!, 100 / users)
    ),
  };
}
