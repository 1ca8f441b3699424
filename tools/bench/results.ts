/**
 * The results of one benchmark run, as the phases return them and as
 * `results.json` stores them; the report, the chart and the targets read this.
 *
 * @module
 */

import type { BulkResult } from "./bulk.ts";
import type { DrainResult } from "./drain.ts";
import type { EndToEndResult } from "./end_to_end.ts";
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
  /** Many users per request through Traefik, with the single-user reference. */
  readonly bulk?: BulkResult;
  /** Phases left out, with why. */
  readonly skipped: readonly string[];
}
