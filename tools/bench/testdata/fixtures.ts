/**
 * Results the benchmark's unit tests start from: a real quick run's
 * results.json, and a run that measured nothing.
 *
 * @module
 */

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
