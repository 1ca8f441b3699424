/**
 * Phase 3, end to end: the whole native stack (Traefik, API replicas,
 * consumers, Redis, PostgreSQL, as `./stack up` runs it) under an open-model
 * k6 load at rising arrival rates. For each rate: what was accepted and what
 * was stored per second over the same window, the largest backlog seen (LLEN
 * polled during the run), and the enqueue → stored latency computed in SQL
 * from each row's `stored_at - enqueued_at`.
 *
 * A rate counts as sustained when the stack took what k6 sent: ≥ 99% of the
 * requests answered 202, and the consumers stored as fast as the API accepted
 * over the window (so the backlog does not grow). k6 itself must have sent
 * ≥ 95% of what was asked: on a busy two-core machine it starts iterations
 * late (dropped iterations) before the stack is the limit, and a rate it did
 * not offer says nothing about the stack. The ladder doubles the rate until one is not sustained, then tries
 * the midpoint once, and finally measures half the highest sustained rate
 * (for the latency target) if it was not already on the ladder.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { queueKeys } from "../../queue/keys.ts";
import { RedisQueue } from "../../queue/redis_queue.ts";
import { startTestStack } from "../harness/services.ts";
import { delay, waitFor } from "../harness/wait.ts";
import { benchPostgresOptions } from "./bench_services.ts";
import { type K6Result, runK6 } from "./k6.ts";
import { onInterrupt } from "./interrupt.ts";
import { readMachineCpu, readTreeCpuSeconds } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";

/** Sizes of the end-to-end phase. */
export interface EndToEndPlan {
  /** Length of each rate's run; 0 skips the phase. */
  readonly seconds: number;
  /** The ladder's first rate (req/s). */
  readonly startRate: number;
  /** The ladder stops here even if every rate was sustained. */
  readonly maxRate: number;
  /** API replicas behind Traefik. */
  readonly servers: number;
  readonly consumers: number;
}

/** One rate's measurement. */
export interface RateRun {
  /** The arrival rate asked of k6. */
  readonly offered: number;
  readonly k6: K6Result;
  /** 202s per second over the run. */
  readonly acceptedPerSecond: number;
  /** Rows stored per second over the same window (first to last enqueue). */
  readonly storedPerSecond: number;
  /** The longest the queue got during the run. */
  readonly maxBacklog: number;
  /** Queue length when k6 finished. */
  readonly endBacklog: number;
  /** Enqueue → stored latency, from the table, in milliseconds. */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  /** Rows stored in the end, against 202s answered (they must match). */
  readonly stored: number;
  /** CPU used during the run by each part, in cores; `machine` is everything on the machine. */
  readonly cores: Readonly<Record<CpuPart, number>>;
  readonly sustained: boolean;
}

/** The parts whose CPU is measured during each run. */
export type CpuPart =
  | "k6"
  | "traefik"
  | "api"
  | "consumers"
  | "redis"
  | "postgres"
  | "machine";

/** Everything the end-to-end phase measured. */
export interface EndToEndResult {
  readonly plan: EndToEndPlan;
  readonly runs: readonly RateRun[];
  /** The highest rate that was sustained, or 0. */
  readonly maxSustained: number;
  /** The run at half of it, for the latency target. */
  readonly half?: RateRun;
}

/** Whether a run kept up with what was offered (see the module doc). */
export function isSustained(run: Omit<RateRun, "sustained">, seconds: number): boolean {
  const asked = run.offered * seconds;
  return run.k6.requests >= 0.95 * asked &&
    run.k6.accepted >= 0.99 * run.k6.requests &&
    run.storedPerSecond >= 0.98 * run.acceptedPerSecond;
}

/** The next rate to try, or undefined when the ladder is done. */
export function nextRate(
  runs: readonly Pick<RateRun, "offered" | "sustained">[],
  plan: Pick<EndToEndPlan, "startRate" | "maxRate">,
): number | undefined {
  if (runs.length === 0) return plan.startRate;
  const ok = runs.filter((r) => r.sustained).map((r) => r.offered);
  const failed = runs.filter((r) => !r.sustained).map((r) => r.offered);
  const best = ok.length ? Math.max(...ok) : 0;
  const worst = failed.length ? Math.min(...failed) : Infinity;
  if (worst === Infinity) {
    const next = best * 2;
    return next <= plan.maxRate ? next : undefined;
  }
  // One midpoint between the last sustained and the first failed rate, rounded to 50 req/s,
  // unless it was tried already (a rate off the doubling ladder).
  const onLadder = (rate: number) => Number.isInteger(Math.log2(rate / plan.startRate));
  if (best === 0 || runs.some((r) => !onLadder(r.offered))) return undefined;
  const mid = Math.round((best + worst) / 2 / 50) * 50;
  return mid > best && mid < worst ? mid : undefined;
}

/** Runs the end-to-end phase on a fresh native stack. */
export async function runEndToEnd(
  plan: EndToEndPlan,
  progress: Progress,
): Promise<EndToEndResult> {
  progress.step(
    `starting the native stack: Traefik, ${plan.servers} API replicas, ${plan.consumers} consumers`,
  );
  await using test = await startTestStack({ servers: plan.servers, consumers: plan.consumers });
  using _forget = { [Symbol.dispose]: onInterrupt(() => test.close()) };
  const { stack } = test;
  const env = stack.env;
  const redis = new Redis(env.REDIS_URL!, { maxRetriesPerRequest: 1 });
  const sql = postgres(benchPostgresOptions(env, 1));
  const queueName = env.QUEUE_NAME || "users";
  const queue = new RedisQueue(redis, queueKeys(queueName));
  progress.step(`stack ready at ${stack.url}`);
  const runs: RateRun[] = [];

  const cpuNow = async (): Promise<Record<Exclude<CpuPart, "k6">, number>> => {
    const groups: [Exclude<CpuPart, "k6" | "machine">, (number | undefined)[]][] = [
      ["traefik", [stack.traefik?.pid]],
      ["api", stack.servers.map((s) => s.pid)],
      ["consumers", stack.consumers.map((c) => c.pid)],
      ["redis", [stack.redis?.pid]],
      ["postgres", [stack.postgres?.pid]],
    ];
    const [seconds, machine] = await Promise.all([
      readTreeCpuSeconds(groups.flatMap(([, pids]) => pids.map((pid) => pid ?? 0))),
      readMachineCpu(),
    ]);
    let next = 0;
    const parts = groups.map(([part, pids]) => {
      const total = seconds.slice(next, next + pids.length).reduce((a, b) => a + b, 0);
      next += pids.length;
      return [part, total] as const;
    });
    return { ...Object.fromEntries(parts), machine: machine.busySeconds } as Record<
      Exclude<CpuPart, "k6">,
      number
    >;
  };

  const measure = async (offered: number): Promise<RateRun> => {
    await sql`truncate users`;
    const cpuBefore = await cpuNow();
    let maxBacklog = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        maxBacklog = Math.max(maxBacklog, await redis.llen(queueName));
        await delay(100);
      }
    })();
    let k6: K6Result;
    try {
      k6 = await runK6(stack.url, { rate: offered, seconds: plan.seconds });
    } finally {
      polling = false;
      await poller;
    }
    const cpuAfter = await cpuNow();
    const cores = Object.fromEntries(
      Object.entries(cpuAfter).map(([part, seconds]) => [
        part,
        (seconds - cpuBefore[part as keyof typeof cpuBefore]) / k6.seconds,
      ]),
    ) as Record<Exclude<CpuPart, "k6">, number>;
    const endBacklog = await redis.llen(queueName);
    // Let the consumers finish, then read everything from the table.
    await waitFor("the backlog to drain", async () => {
      const depth = await queue.depth();
      return depth.queued + depth.processing + depth.retry === 0;
    }, { intervalMs: 100, timeoutMs: 120_000 });
    const [row] = await sql<
      { stored: number; window: number; in_window: number; p50: number; p99: number; max: number }[]
    >`
      with w as (select min(enqueued_at) as first, max(enqueued_at) as last from users)
      select count(*)::int as stored,
        extract(epoch from (select last - first from w))::float8 as window,
        (count(*) filter (where stored_at <= (select last from w)))::int as in_window,
        extract(epoch from percentile_cont(0.5) within group (order by stored_at - enqueued_at))::float8 * 1000 as p50,
        extract(epoch from percentile_cont(0.99) within group (order by stored_at - enqueued_at))::float8 * 1000 as p99,
        extract(epoch from max(stored_at - enqueued_at))::float8 * 1000 as max
      from users`;
    const window = Math.max(row?.window ?? 0, 0.001);
    const partial = {
      offered,
      k6,
      acceptedPerSecond: k6.accepted / plan.seconds,
      storedPerSecond: (row?.in_window ?? 0) / window,
      maxBacklog,
      endBacklog,
      latencyMs: { p50: row?.p50 ?? 0, p99: row?.p99 ?? 0, max: row?.max ?? 0 },
      stored: row?.stored ?? 0,
      cores: { ...cores, k6: (k6.cpuSeconds ?? 0) / k6.seconds },
    };
    const run = { ...partial, sustained: isSustained(partial, plan.seconds) };
    progress.step(
      `${formatCount(offered).padStart(6)} req/s offered: ${
        formatCount(run.acceptedPerSecond)
      } accepted/s, ${formatCount(run.storedPerSecond)} stored/s, backlog ≤ ${
        formatCount(maxBacklog)
      }, enqueue→stored p50 ${run.latencyMs.p50.toFixed(1)} ms p99 ${
        run.latencyMs.p99.toFixed(1)
      } ms, dropped ${k6.dropped}, non-202 ${k6.rejected + k6.failed}${
        run.stored === k6.accepted ? "" : `, STORED ${run.stored} ≠ ACCEPTED ${k6.accepted}`
      } → ${run.sustained ? "sustained" : "not sustained"}; cores: ${
        Object.entries(run.cores).map(([part, n]) => `${part} ${n.toFixed(2)}`).join(", ")
      }`,
    );
    return run;
  };

  try {
    for (let rate = nextRate(runs, plan); rate !== undefined; rate = nextRate(runs, plan)) {
      runs.push(await measure(rate));
    }
    const sustained = runs.filter((r) => r.sustained).map((r) => r.offered);
    const maxSustained = sustained.length ? Math.max(...sustained) : 0;
    let half = runs.find((r) => r.offered === maxSustained / 2);
    if (maxSustained > 0 && half === undefined && maxSustained / 2 >= 1) {
      half = await measure(Math.round(maxSustained / 2));
      runs.push(half);
    }
    return { plan, runs: runs.toSorted((a, b) => a.offered - b.offered), maxSustained, half };
  } finally {
    redis.disconnect();
    await sql.end({ timeout: 5 });
  }
}
