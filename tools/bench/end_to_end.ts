/**
 * Phase 3, end to end: the whole native stack (Traefik, API replicas,
 * consumers, Redis, PostgreSQL, as compose runs them) under an open-model
 * load from oha (a fixed request rate, latency-corrected) at rising rates up
 * to Traefik's own ceiling on this machine: what Traefik in front of the
 * HTTP floor (`http_floor.ts`) passes in closed loop (through_traefik.ts measures
 * it; this phase measures it itself when that phase did not run). For each
 * rate: what was accepted and what was stored per second over the same
 * window, the largest backlog seen (LLEN polled during the run), and the
 * enqueue → stored latency computed in SQL from each row's
 * `stored_at - enqueued_at`, the cause of every 503 (refusals.ts: Traefik's
 * own by its body in oha's record of each answer, the API's by the code its
 * replicas counted), and the stack's QUEUE_MAX_LENGTH and REDIS_TIMEOUT_MS,
 * which the checks (checks.ts) hold each rate below the ceiling to: a
 * `queue_full` only with the backlog at the bound, every answer within the
 * contract's time, next to nothing left unsent.
 *
 * The rates are fixed fractions of the ceiling (measured up to
 * the rate Traefik sustains, the latency bound at half of it), so a rate the
 * stack cannot sustain is measured too: its excess waits in the queue (or is
 * answered 503 once the queue is full), and every 202 must still be stored.
 * A rate counts as sustained when the stack took what oha sent: ≥ 99% of the
 * requests answered 202, and the consumers stored as fast as the API
 * accepted over the window (so the backlog does not grow), with oha having
 * sent all but {@linkcode UNSENT_SHARE_MAX} of what was asked (more, and every
 * one of its connections waited on an answer; its CPU is in the table).
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { queueKeys, ShardedQueue } from "@users-pipeline/queue";
import { depthOf } from "@users-pipeline/harness/queue_fill";
import { startTestStack } from "@users-pipeline/harness/services";
import type { NativeStack } from "@users-pipeline/harness/supervisor";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { benchPostgresOptions } from "./bench_services.ts";
import { type CourseEndToEndResult, runCourseEndToEnd } from "./course_end_to_end.ts";
import { HTTP_FLOOR_COMMAND, startApi } from "./deno_task.ts";
import { onInterrupt } from "./interrupt.ts";
import { type LoadResult, runOha } from "./oha.ts";
import {
  describeRefusals,
  explainRefusals,
  read503BodyLengths,
  readApiRefusals,
  type Refusals,
} from "./refusals.ts";
import { startTraefikFront } from "./traefik_front.ts";
import { readMachineCpu, readTreeCpuSeconds } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";

/** Sizes of the end-to-end phase. */
export interface EndToEndPlan {
  /** Length of each rate's run; 0 skips the phase. */
  readonly seconds: number;
  /** The rates, as fractions of Traefik's ceiling (1 = the ceiling). */
  readonly fractions: readonly number[];
  /** Length of the ceiling's run when this phase measures it itself. */
  readonly ceilingSeconds: number;
  /** API replicas behind Traefik. */
  readonly servers: number;
  readonly consumers: number;
}

/** One rate's measurement. */
export interface RateRun {
  /** The request rate asked of the load generator. */
  readonly offered: number;
  /** What the load generator (oha) sent and was answered. */
  readonly load: LoadResult;
  /** 202s per second over the run. */
  readonly acceptedPerSecond: number;
  /** Rows stored per second over the same window (first to last enqueue). */
  readonly storedPerSecond: number;
  /** The longest the queue got during the run. */
  readonly maxBacklog: number;
  /** Queue length when the load generator finished. */
  readonly endBacklog: number;
  /** Enqueue → stored latency, from the table, in milliseconds. */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  /** Rows stored in the end, against 202s answered (they must match). */
  readonly stored: number;
  /** Every 503 by cause, and those no record accounts for. */
  readonly refusals: Refusals;
  /** CPU used during the run by each part, in cores; `machine` is everything on the machine. */
  readonly cores: Readonly<Record<CpuPart, number>>;
  /**
   * Users in each request (`POST /users/batch`, the bulk phase's open model); absent: one
   * (`POST /users`). accepted/s, stored/s and stored count users either way.
   */
  readonly usersPerRequest?: number;
  readonly sustained: boolean;
}

/** The parts whose CPU is measured during each run. */
export type CpuPart =
  | "generator"
  | "traefik"
  | "api"
  | "consumers"
  | "redis"
  | "postgres"
  | "machine";

/** Everything the end-to-end phase measured. */
export interface EndToEndResult {
  readonly plan: EndToEndPlan;
  /** Traefik's ceiling the rates are fractions of (req/s). */
  readonly ceiling: number;
  /** Where the ceiling came from: this phase's own run, or the traefik phase's median. */
  readonly ceilingSource: "own run" | "traefik phase";
  /** The load generator's name and version. */
  readonly generator: string;
  readonly runs: readonly RateRun[];
  /** The highest rate that was sustained, or 0. */
  readonly maxSustained: number;
  /** The stack's QUEUE_MAX_LENGTH: a `queue_full` is expected only once the backlog reached it. */
  readonly queueMaxLength: number;
  /** The stack's REDIS_TIMEOUT_MS, which bounds every answer (docs/delivery.md). */
  readonly redisTimeoutMs: number;
  /** The run at half the ceiling, for the latency target (when the fractions have 0.5). */
  readonly half?: RateRun;
  /** The course's design at the same rates, on the same Redis and PostgreSQL. */
  readonly course?: CourseEndToEndResult;
}

/** Options of {@linkcode runEndToEnd}. */
export interface EndToEndOptions {
  /** Traefik's ceiling measured by the traefik phase. @default measured here */
  ceiling?: number;
  /** The load generator's name and version, for the report. */
  generator: string;
}

/**
 * The share of a rate's requests oha may leave unsent and the rate still
 * count as sustained: a paced generator on a shared 2-core machine slips a
 * few requests behind its schedule, and those due at its deadline are never
 * sent (a handful in a healthy run). More means every one of its connections
 * waited on an answer: the stack did not keep up.
 */
export const UNSENT_SHARE_MAX = 0.01;

/** Whether a run kept up with what was offered (see the module doc). */
export function isSustained(
  run: Pick<RateRun, "offered" | "load" | "acceptedPerSecond" | "storedPerSecond">,
  seconds: number,
): boolean {
  const asked = run.offered * seconds;
  return run.load.requests >= (1 - UNSENT_SHARE_MAX) * asked &&
    run.load.accepted >= 0.99 * run.load.requests &&
    run.storedPerSecond >= 0.98 * run.acceptedPerSecond;
}

/**
 * The ladder's rates: each fraction of `ceiling`, rounded to 50 req/s (at
 * least 50), without repeats, lowest first.
 */
export function ladderRates(ceiling: number, fractions: readonly number[]): number[] {
  const rates = fractions.map((f) => Math.max(50, Math.round(ceiling * f / 50) * 50));
  return [...new Set(rates)].toSorted((a, b) => a - b);
}

/**
 * oha's connections for an open-model rate: enough for the requests in
 * flight if each took 50 ms (a request waits for a free connection, its
 * latency counted from its due time; with every connection busy for longer
 * than that, the stack is past what it sustains and the requests oha could
 * not send in time count as not sent), at least 64 and at most 1000.
 */
export function openConnections(rate: number): number {
  return Math.min(1_000, Math.max(64, Math.ceil(rate * 0.05)));
}

/**
 * Traefik's ceiling, measured here: the HTTP floor in
 * `replicas` replicas behind a Traefik configured as the stack's, oha in
 * closed loop (64 connections) for `seconds` after a 2 s warm-up; req/s.
 */
export async function measureCeiling(replicas: number, seconds: number): Promise<number> {
  const servers = await Promise.all(
    Array.from(
      { length: replicas },
      (_, i) => startApi(`floor-${i + 1}`, HTTP_FLOOR_COMMAND, { env: {} }),
    ),
  );
  try {
    await using front = await startTraefikFront("ceiling", servers.map((s) => s.url));
    await runOha(`${front.url}/users`, { seconds: 2 });
    const run = await runOha(`${front.url}/users`, { seconds });
    return run.requests / run.seconds;
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/** A part of the pipeline and the pids of its processes (undefined: not running). */
export type PartPids = readonly [
  Exclude<CpuPart, "generator" | "machine">,
  readonly (number | undefined)[],
];

/**
 * CPU seconds each part's process trees have used so far, and the machine's
 * busy seconds: read before and after a run, the difference is what it cost.
 */
export async function readPartsCpu(
  groups: readonly PartPids[],
): Promise<Record<Exclude<CpuPart, "generator">, number>> {
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
    Exclude<CpuPart, "generator">,
    number
  >;
}

/** What {@linkcode measureRate} needs of a running native stack. */
export interface RateContext {
  readonly stack: NativeStack;
  readonly redis: Redis;
  readonly sql: postgres.Sql;
  readonly queue: ShardedQueue;
  /** Where oha records each answer, a file per rate. */
  readonly recordDir: string;
  /** Each rate's length. */
  readonly seconds: number;
  readonly progress: Progress;
  /** Each part's CPU seconds so far (see {@linkcode readPartsCpu}). */
  readonly cpuNow: () => Promise<Record<Exclude<CpuPart, "generator">, number>>;
}

/**
 * One open-model rate on a running stack: the table truncated, oha at
 * `offered` requests/s for the context's seconds (each answer recorded),
 * the backlog polled, then drained, and everything read from the table (see
 * the module doc). With `usersPerRequest` above 1 (`POST /users/batch` and a
 * body file), accepted/s and stored count users.
 */
export async function measureRate(
  context: RateContext,
  offered: number,
  options: { path?: string; bodyPath?: string; usersPerRequest?: number } = {},
): Promise<RateRun> {
  const { stack, redis, sql, queue, recordDir, progress, cpuNow } = context;
  const { path = "/users", bodyPath, usersPerRequest = 1 } = options;
  const apiUrls = stack.ports.api.map((port) => `http://127.0.0.1:${port}`);
  const queueName = stack.env.QUEUE_NAME || "users";
  await sql`truncate users`;
  const dbPath = `${recordDir}/${offered}.db`;
  const refusedBefore = await readApiRefusals(apiUrls);
  const cpuBefore = await cpuNow();
  let maxBacklog = 0;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      maxBacklog = Math.max(maxBacklog, await redis.llen(queueName));
      await delay(100);
    }
  })();
  let load: LoadResult;
  try {
    load = await runOha(`${stack.url}${path}`, {
      rate: offered,
      seconds: context.seconds,
      connections: openConnections(offered),
      dbPath,
      ...(bodyPath === undefined ? {} : { bodyPath }),
    });
  } finally {
    polling = false;
    await poller;
  }
  const cpuAfter = await cpuNow();
  const refusals = explainRefusals(load.rejected, read503BodyLengths(dbPath), {
    before: refusedBefore,
    after: await readApiRefusals(apiUrls),
  });
  await Deno.remove(dbPath);
  const cores = Object.fromEntries(
    Object.entries(cpuAfter).map(([part, seconds]) => [
      part,
      (seconds - cpuBefore[part as keyof typeof cpuBefore]) / load.seconds,
    ]),
  ) as Record<Exclude<CpuPart, "generator">, number>;
  const endBacklog = await redis.llen(queueName);
  // Let the consumers finish, then read everything from the table.
  await waitFor("the backlog to drain", async () => {
    const depth = await depthOf(redis, queue.keys);
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
    load,
    acceptedPerSecond: load.accepted * usersPerRequest / context.seconds,
    storedPerSecond: (row?.in_window ?? 0) / window,
    maxBacklog,
    endBacklog,
    latencyMs: { p50: row?.p50 ?? 0, p99: row?.p99 ?? 0, max: row?.max ?? 0 },
    stored: row?.stored ?? 0,
    refusals,
    cores: { ...cores, generator: (load.cpuSeconds ?? 0) / load.seconds },
  };
  const run = {
    ...partial,
    ...(usersPerRequest === 1 ? {} : { usersPerRequest }),
    sustained: isSustained(partial, context.seconds),
  };
  const accepted = load.accepted * usersPerRequest;
  progress.step(
    `${formatCount(offered).padStart(6)} req/s offered${
      usersPerRequest === 1 ? "" : ` (${usersPerRequest} users each)`
    }: ${formatCount(run.acceptedPerSecond)} accepted/s, ${
      formatCount(run.storedPerSecond)
    } stored/s, backlog ≤ ${formatCount(maxBacklog)}, enqueue→stored p50 ${
      run.latencyMs.p50.toFixed(1)
    } ms p99 ${run.latencyMs.p99.toFixed(1)} ms, not sent ${load.dropped}, non-202 ${
      load.rejected + load.failed
    }${load.rejected === 0 ? "" : ` (503s: ${describeRefusals(refusals)})`}${
      run.stored === accepted ? "" : `, STORED ${run.stored} ≠ ACCEPTED ${accepted}`
    } → ${run.sustained ? "sustained" : "not sustained"}; cores: ${
      Object.entries(run.cores).map(([part, n]) => `${part} ${n.toFixed(2)}`).join(", ")
    }`,
  );
  return run;
}

/** Runs the end-to-end phase on a fresh native stack. */
export async function runEndToEnd(
  plan: EndToEndPlan,
  progress: Progress,
  options: EndToEndOptions,
): Promise<EndToEndResult> {
  let ceiling = options.ceiling;
  const ceilingSource = ceiling === undefined ? "own run" : "traefik phase";
  if (ceiling === undefined) {
    progress.step(
      `Traefik's ceiling: ${plan.servers} HTTP floor servers behind Traefik, oha closed loop for ${plan.ceilingSeconds} s`,
    );
    ceiling = await measureCeiling(plan.servers, plan.ceilingSeconds);
  }
  const rates = ladderRates(ceiling, plan.fractions);
  progress.step(
    `Traefik's ceiling ${formatCount(ceiling)} req/s (${ceilingSource}); rates ${
      rates.map(formatCount).join(", ")
    } req/s, ${plan.seconds} s each`,
  );
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
  const queue = new ShardedQueue(redis, { keys: [queueKeys(queueName)] });
  progress.step(`stack ready at ${stack.url}`);
  const runs: RateRun[] = [];

  const cpuNow = () =>
    readPartsCpu([
      ["traefik", [stack.traefik?.pid]],
      ["api", stack.servers.map((s) => s.pid)],
      ["consumers", stack.consumers.map((c) => c.pid)],
      ["redis", [stack.redis?.pid]],
      ["postgres", [stack.postgres?.pid]],
    ]);

  const recordDir = await Deno.makeTempDir({ prefix: "bench-e2e-answers-" });
  const context: RateContext = {
    stack,
    redis,
    sql,
    queue,
    recordDir,
    seconds: plan.seconds,
    progress,
    cpuNow,
  };
  const measure = (offered: number) => measureRate(context, offered);

  try {
    for (const rate of rates) runs.push(await measure(rate));
    const sustained = runs.filter((r) => r.sustained).map((r) => r.offered);
    const maxSustained = sustained.length ? Math.max(...sustained) : 0;
    const halfRate = ladderRates(ceiling, [0.5])[0];
    const half = runs.find((r) => r.offered === halfRate);
    progress.step(
      "the course's design at the same rates: its producer behind the same Traefik configuration, its consumer, on the stack's Redis and PostgreSQL",
    );
    const course = await runCourseEndToEnd(
      {
        env,
        redis,
        sql,
        redisPid: stack.redis?.pid,
        postgresPid: stack.postgres?.pid,
      },
      rates,
      plan.seconds,
      progress,
    );
    return {
      plan,
      ceiling,
      ceilingSource,
      generator: options.generator,
      runs,
      maxSustained,
      queueMaxLength: Number(env.QUEUE_MAX_LENGTH),
      redisTimeoutMs: Number(env.REDIS_TIMEOUT_MS),
      ...(half === undefined ? {} : { half }),
      course,
    };
  } finally {
    redis.disconnect();
    await sql.end({ timeout: 5 });
    await Deno.remove(recordDir, { recursive: true }).catch(() => {});
  }
}
