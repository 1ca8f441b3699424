/**
 * The targets of issues #4 and #10, checked
 * against one run's results. Each is a ratio between figures measured in the
 * same run (or a latency bound), never an absolute throughput, so the verdict
 * survives a slower or busier machine.
 *
 * @module
 */

import { type DrainRun, REFERENCE_BATCH } from "./drain.ts";
import { meanRssBetween, rssWhenDone, secondHalfSpread } from "./growth.ts";
import { cpuMicrosPerRequest, type IngestResult, type IngestRun } from "./ingest.ts";
import type { BenchResults } from "./results.ts";
import { frontMicrosPerRequest } from "./through_traefik.ts";

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

/** Issue #10: the p99 enqueue → stored latency bound at half Traefik's ceiling, in ms. */
export const LATENCY_P99_BOUND_MS = 100;

/** Issue #10: queue mode's req/s as a share of the no-op reference's, at least. */
export const INGEST_SHARE_MIN = 0.95;

/** Issue #10: queue mode's API CPU per request over the reference's, at most. */
export const INGEST_CPU_RATIO_MAX = 1.1;

/** Issue #10: batch 1000 × 1 consumer's rows/s as a share of `insertUsers` from memory, at least. */
export const DRAIN_SHARE_MIN = 0.9;

/**
 * Issue #10: the API takes users at least as fast as the course's own
 * producer (queue ÷ course req/s; directly, and through the same Traefik at
 * the stack's defaults), though it validates, mints an id and bounds the
 * queue where the course's does none of that; and single mode stores them at
 * least as fast as the course's consumer.
 */
export const COURSE_RATIO_MIN = 1.0;

/** `1.03× (median of 3 paired rounds); API CPU 35.1 vs 36.0 µs/request` */
function pairedMeasure(ratio: number, queue: readonly IngestRun[], other: readonly IngestRun[]) {
  return `${ratio.toFixed(2)}× (median of ${
    Math.min(queue.length, other.length)
  } paired rounds); API CPU ${cpuMicrosPerRequest(queue, "serverCores").toFixed(1)} vs ${
    cpuMicrosPerRequest(other, "serverCores").toFixed(1)
  } µs/request`;
}

/** Issue #10's target, from the course's runs. */
function comparisonVerdicts(ingest: IngestResult | undefined): TargetVerdict[] {
  const courseTarget = `queue mode ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's producer's req/s, directly (issue #10)`;
  return [
    ingest
      ? {
        phase: "Ingest",
        target: courseTarget,
        measured: pairedMeasure(ingest.courseRatio, ingest.runs.queue, ingest.runs.course),
        met: ingest.courseRatio >= COURSE_RATIO_MIN,
      }
      : { phase: "Ingest", target: courseTarget, measured: "not measured", met: undefined },
  ];
}

/** Every target of the issue, with this run's figure and verdict. */
export function evaluateTargets(results: BenchResults): TargetVerdict[] {
  const verdicts: TargetVerdict[] = [];
  const { ingest, drain, endToEnd, growth } = results;
  const missing = (phase: string, target: string) =>
    verdicts.push({ phase, target, measured: "not measured", met: undefined });

  const ingestTarget = `queue mode ≥ ${
    pct(INGEST_SHARE_MIN)
  } of the reference's req/s and API CPU µs/request ≤ ${
    INGEST_CPU_RATIO_MAX.toFixed(2)
  }× the reference's (issue #10)`;
  if (ingest) {
    const cpuRatio = cpuMicrosPerRequest(ingest.runs.queue, "serverCores") /
      cpuMicrosPerRequest(ingest.runs.reference, "serverCores");
    verdicts.push({
      phase: "Ingest",
      target: ingestTarget,
      measured: `${
        pct(ingest.queueRatio)
      } (median of ${ingest.runs.queue.length} paired rounds); CPU ${cpuRatio.toFixed(2)}× (${
        cpuMicrosPerRequest(ingest.runs.queue, "serverCores").toFixed(1)
      } vs ${cpuMicrosPerRequest(ingest.runs.reference, "serverCores").toFixed(1)} µs)`,
      met: ingest.queueRatio >= INGEST_SHARE_MIN && cpuRatio <= INGEST_CPU_RATIO_MAX,
    });
  } else missing("Ingest", ingestTarget);
  verdicts.push(...comparisonVerdicts(ingest));

  const traefikTarget = `through Traefik at the stack's defaults ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's producer (1 replica) behind the same Traefik (issue #10)`;
  const { traefik } = results;
  if (traefik && traefik.runs.queue.length > 0 && traefik.runs.course.length > 0) {
    const cpu = (runs: typeof traefik.runs.queue) =>
      (["traefik", "api", "redis"] as const).map((part) =>
        frontMicrosPerRequest(runs, part).toFixed(1)
      ).join(" + ");
    verdicts.push({
      phase: "Traefik",
      target: traefikTarget,
      measured: `${traefik.courseRatio.toFixed(2)}× (median of ${
        Math.min(traefik.runs.queue.length, traefik.runs.course.length)
      } paired rounds); CPU µs/request Traefik + API + Redis ${cpu(traefik.runs.queue)} vs ${
        cpu(traefik.runs.course)
      }`,
      met: traefik.courseRatio >= COURSE_RATIO_MIN,
    });
  } else missing("Traefik", traefikTarget);

  const drainRefTarget = `batch (${REFERENCE_BATCH} × 1 replica) ≥ ${
    pct(DRAIN_SHARE_MIN)
  } of the reference's rows/s (issue #10)`;
  const drainCourseTarget = `single mode ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's consumer (BRPOP, one INSERT per item) (issue #10)`;
  const drainSingleTarget = `batch (${REFERENCE_BATCH} × 1 replica) ≥ 15× single mode`;
  const batch = drain?.batch.find((r) => r.batchSize === REFERENCE_BATCH && r.replicas === 1);
  if (drain && batch) {
    const ofReference = batch.rowsPerSecond / drain.referenceRowsPerSecond;
    const ofSingle = batch.rowsPerSecond / drain.single.rowsPerSecond;
    verdicts.push({
      phase: "Drain",
      target: drainRefTarget,
      measured: pct(ofReference),
      met: ofReference >= DRAIN_SHARE_MIN,
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
  if (drain) {
    const { single, course } = drain;
    const ratio = single.rowsPerSecond / course.rowsPerSecond;
    const perRow = (run: DrainRun) =>
      [run.consumerCores, run.redisCores, run.postgresCores].map((c) =>
        (c / run.rowsPerSecond * 1e6).toFixed(0)
      ).join(" + ");
    verdicts.push({
      phase: "Drain",
      target: drainCourseTarget,
      measured: `${ratio.toFixed(2)}× (${Math.round(single.rowsPerSecond)} vs ${
        Math.round(course.rowsPerSecond)
      } rows/s); CPU µs/row consumer + Redis + PostgreSQL ${perRow(single)} vs ${perRow(course)}`,
      met: ratio >= COURSE_RATIO_MIN,
    });
  } else missing("Drain", drainCourseTarget);

  const e2eDrainTarget = "at the highest sustained rate, drain ≥ ingest over 60 s";
  const e2eCeilingTarget =
    "measured up to Traefik's own ceiling (the no-op server behind it), stored = accepted at every rate (issue #10)";
  const e2eLatencyTarget =
    `p99 enqueue → stored ≤ ${LATENCY_P99_BOUND_MS} ms at half Traefik's ceiling (issue #10)`;
  if (endToEnd) {
    const top = endToEnd.runs.find((r) => r.offered === endToEnd.maxSustained);
    const seconds = endToEnd.plan.seconds;
    verdicts.push({
      phase: "End to end",
      target: e2eDrainTarget,
      measured: top
        ? `${top.offered} req/s: stored ${
          (top.storedPerSecond / top.acceptedPerSecond * 100).toFixed(1)
        }% of accepted/s, backlog ≤ ${top.maxBacklog} over ${seconds} s`
        : "no rate was sustained",
      met: top && seconds >= 60 ? top.storedPerSecond >= 0.98 * top.acceptedPerSecond : undefined,
    });
    const highest = Math.max(0, ...endToEnd.runs.map((r) => r.offered));
    const unkept = endToEnd.runs.filter((r) => r.stored !== r.load.accepted);
    // A ladder that does not climb to the ceiling (the quick run's one rate) judges nothing here.
    const climbs = Math.max(...endToEnd.plan.fractions) >= 1;
    verdicts.push({
      phase: "End to end",
      target: e2eCeilingTarget,
      measured: `ceiling ${
        Math.round(endToEnd.ceiling)
      } req/s (${endToEnd.ceilingSource}); rates up to ${highest} req/s; ${
        unkept.length === 0
          ? "stored = accepted at every rate"
          : `stored ≠ accepted at ${unkept.map((r) => r.offered).join(", ")} req/s`
      }; highest sustained ${endToEnd.maxSustained} req/s (${
        pct(endToEnd.maxSustained / endToEnd.ceiling)
      } of the ceiling)`,
      met: climbs ? highest >= 0.95 * endToEnd.ceiling && unkept.length === 0 : undefined,
    });
    const half = endToEnd.half;
    verdicts.push({
      phase: "End to end",
      target: e2eLatencyTarget,
      measured: half
        ? `${half.latencyMs.p99.toFixed(1)} ms at ${half.offered} req/s${
          half.sustained ? "" : " (not sustained)"
        }`
        : "no run at half the ceiling",
      met: half ? half.latencyMs.p99 <= LATENCY_P99_BOUND_MS : undefined,
    });
  } else {
    missing("End to end", e2eDrainTarget);
    missing("End to end", e2eCeilingTarget);
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
    const { load } = overload;
    verdicts.push({
      phase: "Growth",
      target: apiTarget,
      measured: `RSS ${early.toFixed(0)} → ${
        late.toFixed(0)
      } MiB; ${load.rejected} answered 503, ${load.failed} failed, backlog ≤ ${overload.maxBacklog}/${overload.maxLength}`,
      met: late <= 1.15 * early && load.rejected > 0 && load.failed === 0 &&
        overload.maxBacklog <= overload.maxLength,
    });
  } else {
    missing("Growth", consumerTarget);
    missing("Growth", apiTarget);
  }
  return verdicts;
}
