/**
 * Phase 4, growth: what must not grow. A consumer's memory and speed with a
 * backlog ten times larger (it holds one batch at a time, so neither should
 * change), and an API's memory while it is offered twice what the consumers
 * drain, with a small QUEUE_MAX_LENGTH: the queue fills, the excess is
 * answered 503 at once, and nothing piles up inside the process.
 *
 * @module
 */

import { queueKeys, ShardedQueue } from "@users-pipeline/queue";
import { depthOf, enqueueAll } from "@users-pipeline/harness/queue_fill";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { type BenchServices, freshQueueName } from "./bench_services.ts";
import { consumerEnv, startApi, startDenoProcess, taskCommand } from "./deno_task.ts";
import { type DrainRun, timeDrain } from "./drain.ts";
import { type LoadResult, runOha } from "./oha.ts";
import { API_REFUSALS, type ApiRefusalCounts, readApiRefusals } from "./refusals.ts";
import { benchUsers } from "./preload.ts";
import { peakMiB, type RssSample, sampleRss } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";

/**
 * Requests in flight at most during the overload: enough for the offered rate
 * at the latencies a saturated API shows, few enough that the generator does
 * not take the API's core.
 */
const OVERLOAD_CONNECTIONS = 200;

/** Sizes of the growth phase. */
export interface GrowthPlan {
  /** The smaller backlog. */
  readonly smallBacklog: number;
  /** The larger backlog (ten times the smaller in the full run). */
  readonly largeBacklog: number;
  /** How long the API is overloaded. */
  readonly overloadSeconds: number;
  /** QUEUE_MAX_LENGTH during the overload. */
  readonly overloadMaxLength: number;
}

/** The API under overload. */
export interface OverloadResult {
  /** What one single-mode consumer drained just before, in users/s. */
  readonly drainRate: number;
  /** The offered arrival rate: twice the drain rate. */
  readonly offeredRate: number;
  /** The load generator and its version (`oha 1.16.0`). */
  readonly generator: string;
  /** What the generator counted: an open model at `offeredRate`. */
  readonly load: LoadResult;
  /** The longest the queue got (it must stay at QUEUE_MAX_LENGTH or below). */
  readonly maxBacklog: number;
  /**
   * Users of the overload stored once the consumer drained the rest (they
   * must match the 202s counted).
   */
  readonly stored: number;
  readonly maxLength: number;
  /** The API's 503s during the overload by the code it answered (its own count). */
  readonly refused: ApiRefusalCounts;
  readonly rssSamples: readonly RssSample[];
  /** Mean RSS over the second quarter of the run (after warm-up). */
  readonly earlyRssMiB: number;
  /** Mean RSS over the last quarter of the run. */
  readonly lateRssMiB: number;
  readonly peakRssMiB: number;
}

/** Everything the growth phase measured. */
export interface GrowthResult {
  readonly plan: GrowthPlan;
  readonly small: DrainRun;
  readonly large: DrainRun;
  readonly overload: OverloadResult;
}

/**
 * The RSS at the first sample taken once `rows` were done (the last sample
 * if never): a larger drain's memory at the point where a smaller one ended.
 */
export function rssWhenDone(samples: readonly RssSample[], rows: number): number {
  return (samples.find((s) => (s.done ?? 0) >= rows) ?? samples.at(-1))?.mib ?? 0;
}

/**
 * The RSS samples of a drain's second half: from when half its rows were
 * taken, when the samples count rows, else from half the sampling time. By
 * rows, because sampling starts with the consumer, before its warm-up and the
 * preload: on a drain that is short beside those, half the sampling time
 * falls inside the drain's ramp-up, where the heap grows with the work done.
 */
export function secondHalfSamples(samples: readonly RssSample[]): readonly RssSample[] {
  const rows = Math.max(0, ...samples.map((s) => s.done ?? 0));
  if (rows > 0) return samples.filter((s) => (s.done ?? 0) >= rows / 2);
  const end = samples.at(-1)?.ms ?? 0;
  return samples.filter((s) => s.ms >= end / 2);
}

/** Largest over smallest RSS over a drain's second half (1 = flat). */
export function secondHalfSpread(samples: readonly RssSample[]): number {
  const mib = secondHalfSamples(samples).map((s) => s.mib);
  return mib.length > 0 ? Math.max(...mib) / Math.min(...mib) : 1;
}

/** The mean of the samples whose time falls in [from, to) of the run's length, as fractions. */
export function meanRssBetween(samples: readonly RssSample[], from: number, to: number): number {
  const end = samples.at(-1)?.ms ?? 0;
  const inside = samples.filter((s) => s.ms >= from * end && s.ms < to * end);
  const pool = inside.length > 0 ? inside : samples;
  return pool.reduce((sum, s) => sum + s.mib, 0) / Math.max(1, pool.length);
}

async function overloadApi(
  services: BenchServices,
  plan: GrowthPlan,
  progress: Progress,
  generator: string,
): Promise<OverloadResult> {
  const name = freshQueueName("overload");
  const queue = new ShardedQueue(services.redis, { keys: [queueKeys(name)] });
  await services.resetTable();
  const env = services.serviceEnv({
    QUEUE_NAME: name,
    QUEUE_MAX_LENGTH: String(plan.overloadMaxLength),
  });
  const consumer = startDenoProcess("consumer", taskCommand("consumer"), {
    env: consumerEnv({ ...env, CONSUMER_MODE: "single" }),
  });
  const api = await startApi("api", taskCommand("server"), { env })
    .catch(async (error) => {
      await consumer.stop();
      throw error;
    });
  try {
    const { url } = api;
    // What this consumer drains right now, with the API idle: the overload is relative to it.
    const probe = Math.max(500, Math.min(5_000, plan.overloadMaxLength));
    const before = await services.rowCount();
    const probeStart = performance.now();
    await enqueueAll(queue, benchUsers(probe), 100_000_000);
    await waitFor("the probe to be stored", async () => {
      if (!consumer.process.running) throw new Error(`consumer exited:\n${consumer.output.tail()}`);
      return (await services.rowCount()) - before >= probe;
    }, { intervalMs: 20, timeoutMs: 120_000 });
    const drainRate = probe / ((performance.now() - probeStart) / 1_000);
    const offeredRate = Math.round(2 * drainRate);
    progress.step(
      `one single-mode consumer drains ${formatCount(drainRate)} users/s; offering ${
        formatCount(offeredRate)
      } req/s for ${plan.overloadSeconds} s with QUEUE_MAX_LENGTH=${plan.overloadMaxLength}`,
    );
    const sampler = sampleRss(api.pid, 500);
    let maxBacklog = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        maxBacklog = Math.max(maxBacklog, await services.redis.llen(name));
        await delay(100);
      }
    })();
    let load: LoadResult;
    let samples: RssSample[];
    const refusedBefore = await readApiRefusals([url]);
    try {
      load = await runOha(`${url}/users`, {
        rate: offeredRate,
        seconds: plan.overloadSeconds,
        connections: OVERLOAD_CONNECTIONS,
      });
    } finally {
      polling = false;
      await poller;
      samples = await sampler.stop();
    }
    const refusedAfter = await readApiRefusals([url]);
    const refused = Object.fromEntries(
      API_REFUSALS.map((reason) => [reason, refusedAfter[reason] - refusedBefore[reason]]),
    ) as Record<typeof API_REFUSALS[number], number>;
    await waitFor("the overload's backlog to be stored", async () => {
      if (!consumer.process.running) throw new Error(`consumer exited:\n${consumer.output.tail()}`);
      const depth = await depthOf(services.redis, queue.keys);
      return depth.queued + depth.processing + depth.retry === 0;
    }, { intervalMs: 50, timeoutMs: 120_000 });
    const stored = (await services.rowCount()) - before - probe;
    return {
      drainRate,
      offeredRate,
      generator,
      load,
      maxBacklog,
      stored,
      maxLength: plan.overloadMaxLength,
      refused,
      rssSamples: samples,
      earlyRssMiB: meanRssBetween(samples, 0.25, 0.5),
      lateRssMiB: meanRssBetween(samples, 0.75, 1.01),
      peakRssMiB: peakMiB(samples),
    };
  } finally {
    await Promise.all([api.stop(), consumer.stop()]);
    await services.redis.del(name);
  }
}

function describeDrain(run: DrainRun): string {
  return `backlog ${formatCount(run.users).padStart(9)}: ${
    formatCount(run.rowsPerSecond).padStart(7)
  } rows/s, consumer peak RSS ${run.peakRssMiB.toFixed(0)} MiB`;
}

/** Runs the growth phase. */
export async function runGrowth(
  services: BenchServices,
  plan: GrowthPlan,
  progress: Progress,
  generator: string,
): Promise<GrowthResult> {
  const setup = { mode: "batch", batchSize: 1_000, replicas: 1 } as const;
  const small = await timeDrain(services, { ...setup, users: plan.smallBacklog });
  progress.step(describeDrain(small));
  const large = await timeDrain(services, { ...setup, users: plan.largeBacklog });
  progress.step(
    `${describeDrain(large)}; ${rssWhenDone(large.rssSamples, small.users).toFixed(0)} MiB once ${
      formatCount(small.users)
    } were stored`,
  );
  const overload = await overloadApi(services, plan, progress, generator);
  const { load } = overload;
  progress.step(
    `API under 2× overload: ${formatCount(load.accepted / load.seconds)} accepted/s, ${
      formatCount(load.rejected / load.seconds)
    } answered 503/s, ${load.failed} failed, ${overload.stored} of ${load.accepted} accepted stored, backlog ≤ ${
      formatCount(overload.maxBacklog)
    }; RSS ${overload.earlyRssMiB.toFixed(0)} → ${overload.lateRssMiB.toFixed(0)} MiB (peak ${
      overload.peakRssMiB.toFixed(0)
    })`,
  );
  await services.resetTable();
  return { plan, small, large, overload };
}
