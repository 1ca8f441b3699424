/**
 * The targets, checked against one run's results. Each is a ratio between
 * figures measured in the same run (or a latency bound), never an absolute
 * throughput, so the verdict survives a slower or busier machine; and each
 * ratio is read against a floor (what the runtime or the database cannot
 * beat) or against the course's own code, never against ours with a part
 * taken out.
 *
 * @module
 */

import { type DrainRun, FLOOR_BATCH } from "./drain.ts";
import { meanRssBetween, rssWhenDone, secondHalfSpread } from "./growth.ts";
import { apiAndRedisMicrosPerRequest, type IngestResult, median } from "./ingest.ts";
import { BULK_PARTS, pipelineMicrosPerUser } from "./bulk.ts";
import { courseEndToEndRatio } from "./course_end_to_end.ts";
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

/** The p99 enqueue → stored latency bound at half Traefik's ceiling, in ms. */
export const LATENCY_P99_BOUND_MS = 100;

/**
 * One API process's req/s as a share of the HTTP floor's, at least: what is
 * left after the floor pays for the contract (validation, the id, the
 * envelope, the bound, the push and its deadline, the metrics).
 */
export const INGEST_SHARE_MIN = 0.7;

/** Batch 1000 × 1 consumer's rows/s as a share of the drain floor's, at least. */
export const DRAIN_SHARE_MIN = 0.9;

/**
 * Ours against the course's own code, at least as good: through the same
 * Traefik at each one's defaults (req/s, queue ÷ course), and single mode
 * against the course's consumer (rows/s); and at most as costly: the API's
 * and Redis's CPU per request directly (ours ÷ course).
 */
export const COURSE_RATIO_MIN = 1.0;

/**
 * Our stack's highest sustained end-to-end rate over the course's design's
 * (its producer and consumer behind the same Traefik, at the same rates), at
 * least: the contract's extra work is paid for by batching, grouped pushes
 * and a second replica, and the whole path should keep up with more than the
 * one-at-a-time design it replaces.
 */
export const COURSE_E2E_RATIO_MIN = 1.5;

/** The batch size the bulk targets are read at. */
export const BULK_TARGET_SIZE = 100;

/**
 * Users/s at {@linkcode BULK_TARGET_SIZE} users per request over the
 * single-user requests/s of the same stack in the same run, at least: a
 * batch spreads each request's fixed cost (Traefik, the HTTP exchange, the
 * API's middleware, a script call) over its users.
 */
export const BULK_SPEEDUP_MIN = 20;

/**
 * The pipeline's CPU per user at {@linkcode BULK_TARGET_SIZE} per request
 * (every tier but the load generator), at most, in µs: a few times what
 * PostgreSQL alone spends inserting a row in a batch, so that 1M users/s
 * fits in a few tens of cores.
 */
export const BULK_PIPELINE_MICROS_MAX = 15;

/**
 * The highest sustained users/s end to end at {@linkcode BULK_TARGET_SIZE} users per request,
 * as a share of the drain floor's rows/s, at least: the pipeline costs no more than four times
 * the database's own insert.
 */
export const BULK_OPEN_FLOOR_SHARE_MIN = 0.25;

/** The API's plus Redis's CPU per request directly, ours over the course's producer's, at most. */
export const COURSE_CPU_RATIO_MAX = 1.0;

/** Every target, with this run's figure and verdict. */
export function evaluateTargets(results: BenchResults): TargetVerdict[] {
  const verdicts: TargetVerdict[] = [];
  const { ingest, drain, endToEnd, growth } = results;
  const missing = (phase: string, target: string) =>
    verdicts.push({ phase, target, measured: "not measured", met: undefined });

  const cpuTarget = `API + Redis CPU per request directly ≤ ${
    COURSE_CPU_RATIO_MAX.toFixed(1)
  }× the course's producer's (each with its own Redis)`;
  if (ingest) verdicts.push(courseCpuVerdict(ingest, cpuTarget));
  else missing("Ingest", cpuTarget);

  const floorTarget = `one API process ≥ ${
    pct(INGEST_SHARE_MIN)
  } of the HTTP floor's req/s (Deno.serve + Hono answering 202, nothing else)`;
  if (ingest) {
    verdicts.push({
      phase: "Ingest",
      target: floorTarget,
      measured: `${pct(ingest.queueRatio)} (median of ${
        Math.min(ingest.runs.queue.length, ingest.runs.floor.length)
      } paired rounds)`,
      met: ingest.queueRatio >= INGEST_SHARE_MIN,
    });
  } else missing("Ingest", floorTarget);

  const traefikTarget = `through Traefik at the stack's defaults ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's producer (1 replica) behind the same Traefik`;
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

  const drainRefTarget = `batch (${FLOOR_BATCH} × 1 replica) ≥ ${
    pct(DRAIN_SHARE_MIN)
  } of the drain floor's rows/s (an insert from memory over a consumer's two connections, the best of 1–4 statements in flight)`;
  const drainCourseTarget = `single mode ≥ ${
    COURSE_RATIO_MIN.toFixed(1)
  }× the course's consumer (BRPOP, one INSERT per item)`;
  const drainSingleTarget = `batch (${FLOOR_BATCH} × 1 replica) ≥ 15× single mode`;
  const batch = drain?.batch.find((r) => r.batchSize === FLOOR_BATCH && r.replicas === 1);
  if (drain && batch) {
    const ofReference = batch.rowsPerSecond / drain.floorRowsPerSecond;
    const ofSingle = batch.rowsPerSecond / drain.single.rowsPerSecond;
    verdicts.push({
      phase: "Drain",
      target: drainRefTarget,
      measured: `${pct(ofReference)} (${Math.round(batch.rowsPerSecond)} vs ${
        Math.round(drain.floorRowsPerSecond)
      } rows/s)`,
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

  verdicts.push(drainVersusIngest(results));

  const e2eCeilingTarget =
    "every rate up to Traefik's own ceiling (the HTTP floor behind it) measured, stored = accepted at every rate";
  const e2eLatencyTarget =
    `p99 enqueue → stored ≤ ${LATENCY_P99_BOUND_MS} ms at half Traefik's ceiling, sustained`;
  if (endToEnd) {
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
    // A rate the stack did not sustain leaves its excess unsent or queued, so the p99 of the rows
    // it did store says nothing of that rate: the target is missed there, whatever the figure.
    verdicts.push({
      phase: "End to end",
      target: e2eLatencyTarget,
      measured: half
        ? half.sustained
          ? `${half.latencyMs.p99.toFixed(1)} ms at ${half.offered} req/s (sustained)`
          : `${half.offered} req/s not sustained (p99 ${
            half.latencyMs.p99.toFixed(1)
          } ms of the rows it stored, not judged)`
        : "no run at half the ceiling",
      met: half ? half.sustained && half.latencyMs.p99 <= LATENCY_P99_BOUND_MS : undefined,
    });
  } else {
    missing("End to end", e2eCeilingTarget);
    missing("End to end", e2eLatencyTarget);
  }
  verdicts.push(courseEndToEndVerdict(results));

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
  verdicts.push(...bulkVerdicts(results));
  return verdicts;
}

/**
 * Our highest sustained single-user rate end to end against the course's
 * design's, both on the same ladder of open-model rates in the same run; with
 * what the course's design stored of what it accepted, which it may fall
 * short of by design and is shown, not enforced.
 */
export function courseEndToEndVerdict(results: BenchResults): TargetVerdict {
  const target = `end to end, highest sustained single-user rate ≥ ${
    COURSE_E2E_RATIO_MIN.toFixed(1)
  }× the course's design's (its producer behind the same Traefik and its consumer, same rates)`;
  const e2e = results.endToEnd;
  const course = e2e?.course;
  if (!e2e || !course) {
    return { phase: "End to end", target, measured: "not measured", met: undefined };
  }
  const ratio = courseEndToEndRatio(e2e.maxSustained, course);
  const kept = course.runs.map((r) =>
    r.stored === r.load.accepted
      ? `${r.offered}: all ${r.load.accepted}`
      : `${r.offered}: ${r.stored} of ${r.load.accepted}`
  ).join(", ");
  const figures = `ours ${e2e.maxSustained} req/s, the course's ${course.maxSustained} req/s`;
  return {
    phase: "End to end",
    target,
    measured: ratio === undefined
      ? `${figures}: the course's design sustained every rate run (up to ${
        Math.max(...course.runs.map((r) => r.offered))
      } req/s), so the ladder did not find its limit, not judged; the course's stored of accepted by rate ${kept}`
      : `${
        Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "the course's sustained none"
      } (${figures}); the course's stored of accepted by rate ${kept}`,
    met: ratio === undefined ? undefined : ratio >= COURSE_E2E_RATIO_MIN,
  };
}

/** The bulk phase's targets, read at {@linkcode BULK_TARGET_SIZE} users per request. */
export function bulkVerdicts(results: BenchResults): TargetVerdict[] {
  return [...closedLoopVerdicts(results), ...openVerdicts(results)];
}

/** Users/s and the pipeline's CPU per user, closed loop. */
function closedLoopVerdicts(results: BenchResults): TargetVerdict[] {
  const speedTarget =
    `users/s at ${BULK_TARGET_SIZE} users per request ≥ ${BULK_SPEEDUP_MIN}× the single-user POST /users req/s, same stack, same run`;
  const cpuTarget =
    `the pipeline's CPU per user at ${BULK_TARGET_SIZE} users per request (Traefik + API + Redis + consumers + PostgreSQL, to stored) ≤ ${BULK_PIPELINE_MICROS_MAX} µs`;
  const bulk = results.bulk;
  const run = bulk?.batches.find((r) => r.usersPerRequest === BULK_TARGET_SIZE);
  if (!bulk || !run) {
    return [speedTarget, cpuTarget].map((target) => ({
      phase: "Bulk",
      target,
      measured: "not measured",
      met: undefined,
    }));
  }
  const speedup = run.usersPerSecond / bulk.single.requestsPerSecond;
  const micros = pipelineMicrosPerUser(run);
  const tiers = BULK_PARTS.filter((p) => p !== "generator").map((p) =>
    `${p} ${run.microsPerUser[p].toFixed(1)}`
  ).join(" + ");
  return [{
    phase: "Bulk",
    target: speedTarget,
    measured: `${speedup.toFixed(1)}× (${Math.round(run.usersPerSecond)} users/s vs ${
      Math.round(bulk.single.requestsPerSecond)
    } req/s)`,
    met: speedup >= BULK_SPEEDUP_MIN,
  }, {
    phase: "Bulk",
    target: cpuTarget,
    measured: `${micros.toFixed(1)} µs (${tiers}); single-user ${
      pipelineMicrosPerUser(bulk.single).toFixed(1)
    } µs`,
    met: micros <= BULK_PIPELINE_MICROS_MAX,
  }];
}

/** The open-model targets at {@linkcode BULK_TARGET_SIZE} users per request. */
function openVerdicts(results: BenchResults): TargetVerdict[] {
  const floorTarget =
    `end to end, open model, ${BULK_TARGET_SIZE} users per request: highest sustained users/s (stored = accepted) ≥ ${
      pct(BULK_OPEN_FLOOR_SHARE_MIN)
    } of the drain floor's rows/s`;
  const latencyTarget =
    `end to end, ${BULK_TARGET_SIZE} users per request: p99 enqueue → stored ≤ ${LATENCY_P99_BOUND_MS} ms at half the highest sustained rate, sustained`;
  const open = results.bulk?.open;
  const floor = results.drain?.floorRowsPerSecond;
  const verdicts: TargetVerdict[] = [];
  if (open && floor !== undefined) {
    const unkept = open.runs.filter((r) => r.stored !== r.load.accepted * open.usersPerRequest);
    const share = open.maxSustainedUsers / floor;
    verdicts.push({
      phase: "Bulk",
      target: floorTarget,
      measured: `${pct(share)} (${Math.round(open.maxSustainedUsers)} users/s vs ${
        Math.round(floor)
      } rows/s)${
        unkept.length === 0
          ? ""
          : `; stored ≠ accepted at ${unkept.map((r) => r.offered).join(", ")} req/s`
      }${
        open.runs.every((r) => r.sustained)
          ? "; every rate run was sustained, so the stack's limit lies above the ladder"
          : ""
      }`,
      // A ladder whose every rate was sustained (the quick run's one rate) did not find the
      // limit: a share below the target then judges nothing.
      met: unkept.length > 0
        ? false
        : share >= BULK_OPEN_FLOOR_SHARE_MIN
        ? true
        : open.runs.every((r) => r.sustained)
        ? undefined
        : false,
    });
  } else {
    verdicts.push({
      phase: "Bulk",
      target: floorTarget,
      measured: open ? "the drain floor not measured in this run" : "not measured",
      met: undefined,
    });
  }
  const half = open?.half;
  verdicts.push({
    phase: "Bulk",
    target: latencyTarget,
    measured: half
      ? `${half.sustained ? "" : "not sustained, "}p99 ${half.latencyMs.p99.toFixed(1)} ms at ${
        half.offered * open!.usersPerRequest
      } users/s (${half.offered} req/s)`
      : open
      ? "no rate sustained"
      : "not measured",
    met: half ? half.sustained && half.latencyMs.p99 <= LATENCY_P99_BOUND_MS : undefined,
  });
  return verdicts;
}

/** The CPU target against the course's producer, directly. */
function courseCpuVerdict(ingest: IngestResult, target: string): TargetVerdict {
  const ours = apiAndRedisMicrosPerRequest(ingest.runs.queue);
  const course = apiAndRedisMicrosPerRequest(ingest.runs.course);
  const ratio = ours / course;
  return {
    phase: "Ingest",
    target,
    measured: `${ratio.toFixed(2)}× (${ours.toFixed(1)} vs ${
      course.toFixed(1)
    } µs, medians of ${ingest.runs.queue.length} and ${ingest.runs.course.length} runs); req/s ${
      ingest.courseRatio.toFixed(2)
    }× the course's`,
    met: ratio <= COURSE_CPU_RATIO_MAX,
  };
}

/**
 * Whether the consumers store users as fast as the API takes them, each
 * measured alone in closed loop: the drain of batch {@linkcode FLOOR_BATCH}
 * with the most consumers the drain phase ran (the stack's two, in the
 * plans) against ingest through Traefik at the stack's defaults. Below 1×, a
 * stack loaded at what its front takes builds a backlog that only a lull
 * drains.
 */
export function drainVersusIngest(results: BenchResults): TargetVerdict {
  const target =
    `drain (batch ${FLOOR_BATCH}, the stack's consumers) ≥ ingest through Traefik at the stack's defaults, each alone in closed loop`;
  const { drain, traefik } = results;
  const runs = drain?.batch.filter((r) => r.batchSize === FLOOR_BATCH) ?? [];
  const replicas = Math.max(0, ...runs.map((r) => r.replicas));
  const run = runs.find((r) => r.replicas === replicas);
  const ingest = traefik?.runs.queue ?? [];
  if (run === undefined || ingest.length === 0) {
    return { phase: "Drain vs ingest", target, measured: "not measured", met: undefined };
  }
  const ingestRate = median(ingest.map((r) => r.requestsPerSecond));
  const ratio = run.rowsPerSecond / ingestRate;
  return {
    phase: "Drain vs ingest",
    target,
    measured: `${ratio.toFixed(2)}× (batch ${FLOOR_BATCH} × ${replicas}: ${
      Math.round(run.rowsPerSecond)
    } rows/s; ingest × ${traefik!.plan.replicas}: ${Math.round(ingestRate)} req/s)`,
    met: ratio >= 1,
  };
}
