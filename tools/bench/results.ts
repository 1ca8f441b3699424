/**
 * The results of one benchmark run, as the phases return them and as
 * `results.json` stores them; the report, the chart and the targets read this.
 *
 * @module
 */

import type { DrainResult } from "./drain.ts";
import type { EndToEndResult, RateRun } from "./end_to_end.ts";
import type { GrowthResult } from "./growth.ts";
import type { IngestResult } from "./ingest.ts";
import type { TraefikResult } from "./through_traefik.ts";

/** Where and how the run happened. */
export interface RunInfo {
  /** `capacity`: `--capacity`, only what the capacity model needs. */
  readonly variant: "quick" | "full" | "capacity";
  /** ISO 8601. */
  readonly startedAt: string;
  /** The whole run, set up and reports included. */
  readonly seconds: number;
  readonly cores: number;
  /** The 1-minute load average before the run began (other work on the machine). */
  readonly loadBefore: number;
  /** Tool versions, e.g. `{ deno: "2.9.6", oha: "1.16.0" }`. */
  readonly versions: Readonly<Record<string, string>>;
}

/** Everything one run measured; a phase that did not run is absent. */
export interface BenchResults {
  readonly run: RunInfo;
  readonly ingest?: IngestResult;
  /** Ingest through Traefik: its ceiling, our API, the course's producer. */
  readonly traefik?: TraefikResult;
  readonly drain?: DrainResult;
  readonly endToEnd?: EndToEndResult;
  readonly growth?: GrowthResult;
  /** Phases left out, with why. */
  readonly skipped: readonly string[];
}

/** An end-to-end run as results written before oha drove the phase stored it. */
interface LegacyRateRun {
  readonly k6?: RateRun["load"];
  readonly load?: RateRun["load"];
  readonly cores: Readonly<Record<string, number>>;
}

/**
 * Reads results.json written by an earlier version of the benchmark into
 * today's shape, so `--render` still renders it: end-to-end runs that k6
 * drove (`k6` for `load`, `cores.k6` for `cores.generator`, no ceiling: the
 * highest rate offered stands in for it). Other results are returned as they are.
 */
export function upgradeResults(results: BenchResults): BenchResults {
  const e2e = results.endToEnd as
    | (Omit<EndToEndResult, "runs"> & { runs: readonly (RateRun | LegacyRateRun)[] })
    | undefined;
  if (e2e === undefined || e2e.runs.every((r) => "load" in r && r.load !== undefined)) {
    return results;
  }
  const runs = e2e.runs.map((run) => {
    const { k6, cores, ...rest } = run as LegacyRateRun & Omit<RateRun, "load" | "cores">;
    const { k6: generator = 0, ...parts } = cores;
    return { ...rest, load: run.load ?? k6!, cores: { ...parts, generator } } as RateRun;
  });
  return {
    ...results,
    endToEnd: {
      ...e2e,
      plan: { ...e2e.plan, fractions: e2e.plan.fractions ?? [] },
      ceiling: e2e.ceiling ?? Math.max(0, ...runs.map((r) => r.offered)),
      ceilingSource: e2e.ceilingSource ?? "own run",
      generator: e2e.generator ?? "k6",
      runs,
    },
  };
}
