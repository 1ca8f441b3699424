/**
 * The targets of issue #4 (and ingest's two of issues #9 and #10), checked
 * against one run's results. Each is a ratio between figures measured in the
 * same run (or a latency bound), never an absolute throughput, so the verdict
 * survives a slower or busier machine.
 *
 * @module
 */

import { REFERENCE_BATCH } from "./drain.ts";
import { meanRssBetween, rssWhenDone, secondHalfSpread } from "./growth.ts";
import { cpuMicrosPerRequest, type IngestResult, type IngestRun } from "./ingest.ts";
import type { BenchResults } from "./results.ts";

/** One target's verdict. */
export interface TargetVerdict {
  readonly phase: string;
  /** What is required. */
  readonly target: string;
  /** What this run measured. */
  readonly measured: string;
  /** Undefined when the run did not measure it. */
  readonly met: boolean | undefined;
}

const pct = (ratio: number) => `${(ratio * 100).toFixed(0)}%`;

/** The p99 enqueue → stored latency bound at half the highest sustained rate, in ms. */
export const LATENCY_P99_BOUND_MS = 250;

/**
 * Issue #10: the API takes users at least as fast as the course's own
 * producer (queue ÷ course req/s), though it validates, mints an id and
 * bounds the queue where the course's does none of that.
 */
export const COURSE_RATIO_MIN = 1.0;

/** Issue #9: what changed since the previous build costs ingest at most 5% of its req/s. */
export const BASELINE_RATIO_MIN = 0.95;

/** `1.03× (median of 3 paired rounds); API CPU 35.1 vs 36.0 µs/request` */
function pairedMeasure(ratio: number, queue: readonly IngestRun[], other: readonly IngestRun[]) {
  return `${ratio.toFixed(2)}× (median of ${
    Math.min(queue.length, other.length)
  } paired rounds); API CPU ${cpuMicrosPerRequest(queue, "serverCores").toFixed(1)} vs ${
    cpuMicrosPerRequest(other, "serverCores").toFixed(1)
  } µs/request`;
}

/** Issue #10's and issue #9's targets, from the course and baseline runs when there are any. */
function comparisonVerdicts(ingest: IngestResult | undefined): TargetVerdict[] {
  const courseTarget = `queue mode ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's producer's req/s (issue #10)`;
  const baselineTarget = `ingest cost vs the previous build ≤ ${
    ((1 - BASELINE_RATIO_MIN) * 100).toFixed(0)
  }%: queue mode ≥ ${BASELINE_RATIO_MIN}× its req/s (issue #9)`;
  const { course, baseline } = ingest?.runs ?? {};
  const courseRatio = ingest?.courseRatio;
  const baselineRatio = ingest?.baselineRatio;
  return [
    ingest && course && courseRatio !== undefined
      ? {
        phase: "Ingest",
        target: courseTarget,
        measured: pairedMeasure(courseRatio, ingest.runs.queue, course),
        met: courseRatio >= COURSE_RATIO_MIN,
      }
      : { phase: "Ingest", target: courseTarget, measured: "not measured", met: undefined },
    ingest && baseline && baselineRatio !== undefined
      ? {
        phase: "Ingest",
        target: baselineTarget,
        measured: `${pairedMeasure(baselineRatio, ingest.runs.queue, baseline)}; baseline ${
          ingest.baseline?.commit.slice(0, 7) ?? "?"
        }`,
        met: baselineRatio >= BASELINE_RATIO_MIN,
      }
      : {
        phase: "Ingest",
        target: baselineTarget,
        measured: "not measured (run with --baseline REF)",
        met: undefined,
      },
  ];
}

/** Every target of the issue, with this run's figure and verdict. */
export function evaluateTargets(results: BenchResults): TargetVerdict[] {
  const verdicts: TargetVerdict[] = [];
  const { ingest, drain, endToEnd, growth } = results;
  const missing = (phase: string, target: string) =>
    verdicts.push({ phase, target, measured: "not measured", met: undefined });

  const ingestTarget = "queue mode ≥ 85% of the reference's req/s";
  if (ingest) {
    verdicts.push({
      phase: "Ingest",
      target: ingestTarget,
      measured: `${pct(ingest.queueRatio)} (median of ${ingest.runs.queue.length} paired rounds)`,
      met: ingest.queueRatio >= 0.85,
    });
  } else missing("Ingest", ingestTarget);
  verdicts.push(...comparisonVerdicts(ingest));

  const drainRefTarget = `batch (${REFERENCE_BATCH} × 1 replica) ≥ 60% of the reference's rows/s`;
  const drainSingleTarget = `batch (${REFERENCE_BATCH} × 1 replica) ≥ 15× single mode`;
  const batch = drain?.batch.find((r) => r.batchSize === REFERENCE_BATCH && r.replicas === 1);
  if (drain && batch) {
    const ofReference = batch.rowsPerSecond / drain.referenceRowsPerSecond;
    const ofSingle = batch.rowsPerSecond / drain.single.rowsPerSecond;
    verdicts.push({
      phase: "Drain",
      target: drainRefTarget,
      measured: pct(ofReference),
      met: ofReference >= 0.6,
    }, {
      phase: "Drain",
      target: drainSingleTarget,
      measured: `${ofSingle.toFixed(0)}×`,
      met: ofSingle >= 15,
    });
  } else {
    missing("Drain", drainRefTarget);
    missing("Drain", drainSingleTarget);
  }

  const e2eDrainTarget = "at the highest sustained rate, drain ≥ ingest over 60 s";
  const e2eLatencyTarget = `p99 enqueue → stored ≤ ${LATENCY_P99_BOUND_MS} ms at half that rate`;
  const top = endToEnd?.runs.find((r) => r.offered === endToEnd.maxSustained);
  if (endToEnd && top) {
    const seconds = endToEnd.plan.seconds;
    verdicts.push({
      phase: "End to end",
      target: e2eDrainTarget,
      measured: `${top.offered} req/s: stored ${
        (top.storedPerSecond / top.acceptedPerSecond * 100).toFixed(1)
      }% of accepted/s, backlog ≤ ${top.maxBacklog} over ${seconds} s`,
      met: seconds >= 60 ? top.storedPerSecond >= 0.98 * top.acceptedPerSecond : undefined,
    });
    const half = endToEnd.half;
    verdicts.push({
      phase: "End to end",
      target: e2eLatencyTarget,
      measured: half
        ? `${half.latencyMs.p99.toFixed(1)} ms at ${half.offered} req/s`
        : "no run at half the rate",
      met: half ? half.latencyMs.p99 <= LATENCY_P99_BOUND_MS : undefined,
    });
  } else {
    missing("End to end", e2eDrainTarget);
    missing("End to end", e2eLatencyTarget);
  }

  const consumerTarget =
    "consumer RSS and rows/s do not grow with the backlog: with 10× the backlog, RSS after the same rows ≤ 1.2×, flat (±10%) over the drain's second half, rows/s ≥ 80%";
  const apiTarget =
    "API RSS flat under 2× overload (last quarter ≤ 1.15× second quarter), excess answered 503";
  if (growth) {
    const { small, large, overload } = growth;
    const sameRows = rssWhenDone(large.rssSamples, small.users);
    const rssRatio = sameRows / small.peakRssMiB;
    const speedRatio = large.rowsPerSecond / small.rowsPerSecond;
    const spread = secondHalfSpread(large.rssSamples);
    verdicts.push({
      phase: "Growth",
      target: consumerTarget,
      measured: `after ${small.users} rows: ${
        small.peakRssMiB.toFixed(0)
      } MiB (backlog ${small.users}) vs ${sameRows.toFixed(0)} MiB (backlog ${large.users}), ${
        rssRatio.toFixed(2)
      }×; second-half spread ${((spread - 1) * 100).toFixed(0)}% (peak ${
        large.peakRssMiB.toFixed(0)
      } MiB); rows/s ${pct(speedRatio)}`,
      met: rssRatio <= 1.2 && spread <= 1.1 && speedRatio >= 0.8,
    });
    const early = meanRssBetween(overload.rssSamples, 0.25, 0.5);
    const late = meanRssBetween(overload.rssSamples, 0.75, 1.01);
    const { k6 } = overload;
    verdicts.push({
      phase: "Growth",
      target: apiTarget,
      measured: `RSS ${early.toFixed(0)} → ${
        late.toFixed(0)
      } MiB; ${k6.rejected} answered 503, ${k6.failed} failed, backlog ≤ ${overload.maxBacklog}/${overload.maxLength}`,
      met: late <= 1.15 * early && k6.rejected > 0 && k6.failed === 0 &&
        overload.maxBacklog <= overload.maxLength,
    });
  } else {
    missing("Growth", consumerTarget);
    missing("Growth", apiTarget);
  }
  return verdicts;
}
