/**
 * Phase "bulk": many users per request. The native stack (Traefik, API
 * replicas, consumers, Redis, PostgreSQL, project.env's settings) loaded
 * through Traefik by oha in closed loop with `POST /users/batch` bodies of
 * 1, 10, 100 and 1000 users (a JSON array, the same user as every other
 * phase sends), and with the single-user `POST /users` in the same run: the
 * reference the batch sizes are read against, since what a batch saves is
 * the per-request work a single user pays.
 *
 * The consumers run throughout, so what a user costs is measured whole:
 * each process's CPU from the start of the load until the last user it
 * accepted is stored, over the users stored. Every tier is its own figure
 * (Traefik, the API replicas, Redis, the consumers, PostgreSQL, oha), and
 * the pipeline's cost is every tier but the load generator. Users/s is the
 * users accepted over oha's run: the rate at which the front takes them.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { queueKeys, ShardedQueue } from "@users-pipeline/queue";
import { depthOf } from "@users-pipeline/harness/queue_fill";
import { startTestStack } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
import { benchPostgresOptions } from "./bench_services.ts";
import { type ProfileSummary, summariseProfileDir } from "./cpu_profile.ts";
import { startApi, taskCommand } from "./deno_task.ts";
import {
  type CpuPart,
  ladderRates,
  measureRate,
  type RateContext,
  type RateRun,
  readPartsCpu,
} from "./end_to_end.ts";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import {
  API_REFUSALS,
  type ApiRefusal,
  type ApiRefusalCounts,
  readApiRefusals,
} from "./refusals.ts";
import { onInterrupt } from "./interrupt.ts";
import { type LoadResult, POST_BODY, runOha } from "./oha.ts";
import { formatCount, type Progress } from "./progress.ts";

/** The tiers whose CPU per user is read, the load generator last. */
export const BULK_PARTS = [
  "traefik",
  "api",
  "redis",
  "consumers",
  "postgres",
  "generator",
] as const;

/** One of {@linkcode BULK_PARTS}. */
export type BulkPart = typeof BULK_PARTS[number];

/** Sizes of the bulk phase. */
export interface BulkPlan {
  /** Each run's length; 0 skips the phase. */
  readonly seconds: number;
  /** Unmeasured load before each run, drained before it starts. */
  readonly warmupSeconds: number;
  /**
   * oha's connections at up to {@linkcode BULK_FULL_CONNECTIONS_UP_TO} users per request; fewer
   * above (see {@linkcode bulkConnections}).
   */
  readonly connections: number;
  /** Users per request of the `POST /users/batch` runs. */
  readonly usersPerRequest: readonly number[];
  readonly servers: number;
  readonly consumers: number;
  /** Length of the run that profiles one API replica under batches of 100; 0 skips it. */
  readonly profileSeconds: number;
  /**
   * The open-model ladder at {@linkcode PROFILED_BATCH} users per request: its rates as
   * fractions of the closed-loop run's req/s at that size; empty skips it.
   */
  readonly openFractions: readonly number[];
  /** Each open-model rate's length. */
  readonly openSeconds: number;
}

/** The open-model ladder with many users per request, end to end. */
export interface BulkOpenResult {
  readonly usersPerRequest: number;
  /** The closed-loop req/s at that size, which the rates are fractions of. */
  readonly closedLoopRequests: number;
  /** The ladder, lowest rate first (req/s; users/s is × usersPerRequest). */
  readonly runs: readonly RateRun[];
  /** The highest sustained rate in users/s, or 0. */
  readonly maxSustainedUsers: number;
  /** The run at half the highest sustained rate, for the latency target. */
  readonly half?: RateRun;
  readonly queueMaxLength: number;
  readonly redisTimeoutMs: number;
}

/**
 * Every rate the open model ran: the ladder, and the half-rate run unless the ladder ran that rate
 * (told by rate: a result read back from results.json holds the two as equal copies).
 */
export function openRuns(open: BulkOpenResult): RateRun[] {
  const { half } = open;
  return [
    ...open.runs,
    ...(half && !open.runs.some((r) => r.offered === half.offered) ? [half] : []),
  ];
}

/** One closed-loop run and the drain of what it sent. */
export interface BulkRun {
  /** `POST /users` (one user, no array) or `POST /users/batch`. */
  readonly path: "/users" | "/users/batch";
  readonly usersPerRequest: number;
  readonly load: LoadResult;
  readonly requestsPerSecond: number;
  /** Users accepted per second of oha's run. */
  readonly usersPerSecond: number;
  /** Users in the 202s (202s × users per request). */
  readonly acceptedUsers: number;
  /** Rows in the table once the queue was empty. */
  readonly stored: number;
  /** From the load's start until every accepted user was stored. */
  readonly seconds: number;
  /** Each tier's CPU µs per user stored over that time. */
  readonly microsPerUser: Readonly<Record<BulkPart, number>>;
  /** The machine's busy cores over that time, other tenants included. */
  readonly machineCores: number;
  /** oha's connections. */
  readonly connections: number;
  /** The 503s the API replicas counted during the run, by reason. */
  readonly refused: ApiRefusalCounts;
}

/** Everything the bulk phase measured. */
export interface BulkResult {
  readonly plan: BulkPlan;
  /** The load generator's name and version. */
  readonly generator: string;
  /** `POST /users` in the same stack and run: the single-user reference. */
  readonly single: BulkRun;
  /** `POST /users/batch`, one run per size, smallest first. */
  readonly batches: readonly BulkRun[];
  /** One API replica's CPU profile under batches of {@linkcode PROFILED_BATCH} users. */
  readonly profile?: ProfileSummary;
  /** End to end, open model, with {@linkcode PROFILED_BATCH} users per request. */
  readonly open?: BulkOpenResult;
}

/** The users per request of the profiled run: the targets' size. */
export const PROFILED_BATCH = 100;

/** The largest batch oha sends on all of the plan's connections. */
export const BULK_FULL_CONNECTIONS_UP_TO = 100;

/**
 * oha's connections for `users` per request: the plan's up to
 * {@linkcode BULK_FULL_CONNECTIONS_UP_TO} users, then as many as keep the
 * users in flight at what the plan's connections carry at that size (at least
 * 4, so that the API replicas each have requests to overlap). In closed loop
 * every connection always has a request in the API; 64 batches of 1000 is
 * more work queued in two replicas' event loops than they finish within
 * REDIS_TIMEOUT_MS, and the API's deadline answers 503 for what the
 * generator queued, not for what the stack carries.
 */
export function bulkConnections(connections: number, users: number): number {
  if (users <= BULK_FULL_CONNECTIONS_UP_TO) return connections;
  return Math.max(4, Math.round(connections * BULK_FULL_CONNECTIONS_UP_TO / users));
}

/** The pipeline's CPU per user: every tier but the load generator. */
export function pipelineMicrosPerUser(run: BulkRun): number {
  return BULK_PARTS.filter((p) => p !== "generator").reduce(
    (sum, part) => sum + run.microsPerUser[part],
    0,
  );
}

/** A `POST /users/batch` body of `users` copies of the single-user body. */
export function batchBody(users: number): string {
  return `[${Array.from({ length: users }, () => POST_BODY).join(",")}]`;
}

/**
 * A CPU profile of one more API replica (the `server` task with
 * `--cpu-prof`, on the stack's Redis, the consumers draining), loaded
 * directly by oha with batches of {@linkcode PROFILED_BATCH}: where the API's
 * time per user goes once requests carry many users.
 */
async function profileApi(
  env: Readonly<Record<string, string>>,
  bodyDir: string,
  plan: BulkPlan,
  workDir: string,
): Promise<ProfileSummary | undefined> {
  const dir = await Deno.makeTempDir({ dir: workDir, prefix: "bulk-api-profile-" });
  const bodyPath = `${bodyDir}/profile.json`;
  await Deno.writeTextFile(bodyPath, batchBody(PROFILED_BATCH));
  const server = await startApi("bulk-api-profiled", taskCommand("server"), {
    env: { ...env, REPLICA_ID: "bulk-api-profiled" },
    cpuProfileDir: dir,
  });
  try {
    await runOha(`${server.url}/users/batch`, {
      seconds: plan.profileSeconds,
      connections: bulkConnections(plan.connections, PROFILED_BATCH),
      bodyPath,
    });
  } finally {
    await server.stop();
  }
  return await summariseProfileDir(dir, { repoUrl: `file://${REPO_DIR}/`, top: 12 });
}

/** Runs the bulk phase on a fresh native stack. */
export async function runBulk(
  plan: BulkPlan,
  progress: Progress,
  options: { generator: string; workDir: string },
): Promise<BulkResult> {
  progress.step(
    `starting the native stack: Traefik, ${plan.servers} API replicas, ${plan.consumers} consumers; oha closed loop, ${plan.connections} connections, ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up`,
  );
  await using test = await startTestStack({
    servers: plan.servers,
    consumers: plan.consumers,
    // The bound is not what is measured here: far above what a closed-loop run queues ahead of
    // the consumers.
    env: { QUEUE_MAX_LENGTH: "100000000" },
  });
  using _forget = { [Symbol.dispose]: onInterrupt(() => test.close()) };
  const { stack } = test;
  const env = stack.env;
  const redis = new Redis(env.REDIS_URL!, { maxRetriesPerRequest: 1 });
  const sql = postgres(benchPostgresOptions(env, 1));
  const queue = new ShardedQueue(redis, { keys: [queueKeys(env.QUEUE_NAME || "users")] });
  const bodyDir = await Deno.makeTempDir({ prefix: "bench-bulk-" });
  const drained = () =>
    waitFor("the queue to drain", async () => {
      const depth = await depthOf(redis, queue.keys);
      return depth.queued + depth.processing + depth.retry === 0;
    }, { intervalMs: 20, timeoutMs: 600_000 });
  const apiUrls = stack.ports.api.map((port) => `http://127.0.0.1:${port}`);
  const groups = [
    ["traefik", [stack.traefik?.pid]],
    ["api", stack.servers.map((s) => s.pid)],
    ["consumers", stack.consumers.map((c) => c.pid)],
    ["redis", [stack.redis?.pid]],
    ["postgres", [stack.postgres?.pid]],
  ] as const;

  const measure = async (path: BulkRun["path"], users: number): Promise<BulkRun> => {
    const url = `${stack.url}${path}`;
    let bodyPath: string | undefined;
    if (path === "/users/batch") {
      bodyPath = `${bodyDir}/${users}.json`;
      await Deno.writeTextFile(bodyPath, batchBody(users));
    }
    const connections = bulkConnections(plan.connections, users);
    const options = { connections, ...(bodyPath ? { bodyPath } : {}) };
    await runOha(url, { ...options, seconds: plan.warmupSeconds });
    await drained();
    await sql`truncate users`;
    const refusedBefore = await readApiRefusals(apiUrls);
    const started = performance.now();
    const before = await readPartsCpu(groups);
    const load = await runOha(url, { ...options, seconds: plan.seconds });
    await drained();
    const after = await readPartsCpu(groups);
    const refusedAfter = await readApiRefusals(apiUrls);
    const seconds = (performance.now() - started) / 1_000;
    const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
    const stored = row?.count ?? 0;
    const perUser = (cpuSeconds: number) => cpuSeconds / Math.max(stored, 1) * 1e6;
    const microsPerUser = Object.fromEntries(
      BULK_PARTS.map((part) => [
        part,
        part === "generator"
          ? perUser(load.cpuSeconds ?? 0)
          : perUser(after[part as Exclude<CpuPart, "generator">] - before[part]),
      ]),
    ) as Record<BulkPart, number>;
    const run: BulkRun = {
      path,
      usersPerRequest: users,
      load,
      requestsPerSecond: load.requests / load.seconds,
      usersPerSecond: load.accepted * users / load.seconds,
      acceptedUsers: load.accepted * users,
      stored,
      seconds,
      microsPerUser,
      machineCores: (after.machine - before.machine) / seconds,
      connections,
      refused: Object.fromEntries(
        API_REFUSALS.map((reason) => [reason, refusedAfter[reason] - refusedBefore[reason]]),
      ) as Record<ApiRefusal, number>,
    };
    progress.step(
      `${path === "/users" ? "POST /users      " : `batch of ${String(users).padStart(4)}   `} ${
        formatCount(run.usersPerSecond).padStart(7)
      } users/s (${
        formatCount(run.requestsPerSecond)
      } req/s, ${connections} connections), non-202 ${load.requests - load.accepted}${
        load.rejected === 0
          ? ""
          : ` (the API counted ${
            API_REFUSALS.map((r) => `${run.refused[r]} ${r}`).join(", ")
          }; p99 ${load.latencyMs.p99.toFixed(0)} ms)`
      }, ${stored} stored of ${run.acceptedUsers} accepted; CPU µs/user: ${
        BULK_PARTS.map((p) => `${p} ${microsPerUser[p].toFixed(1)}`).join(", ")
      }; pipeline ${pipelineMicrosPerUser(run).toFixed(1)}`,
    );
    return run;
  };

  try {
    const single = await measure("/users", 1);
    const batches: BulkRun[] = [];
    for (const users of plan.usersPerRequest) batches.push(await measure("/users/batch", users));
    const closed = batches.find((r) => r.usersPerRequest === PROFILED_BATCH);
    let open: BulkOpenResult | undefined;
    if (closed !== undefined && plan.openFractions.length > 0) {
      const bodyPath = `${bodyDir}/open.json`;
      await Deno.writeTextFile(bodyPath, batchBody(PROFILED_BATCH));
      const recordDir = await Deno.makeTempDir({ dir: bodyDir, prefix: "answers-" });
      const context: RateContext = {
        stack,
        redis,
        sql,
        queue,
        recordDir,
        seconds: plan.openSeconds,
        progress,
        cpuNow: () => readPartsCpu(groups),
      };
      const measureOpen = (rate: number) =>
        measureRate(context, rate, {
          path: "/users/batch",
          bodyPath,
          usersPerRequest: PROFILED_BATCH,
        });
      const rates = ladderRates(closed.requestsPerSecond, plan.openFractions);
      progress.step(
        `end to end, open model, ${PROFILED_BATCH} users per request: ${
          rates.map(formatCount).join(", ")
        } req/s (fractions of the closed loop's ${
          formatCount(closed.requestsPerSecond)
        } req/s), ${plan.openSeconds} s each, then half the highest sustained`,
      );
      const runs: RateRun[] = [];
      for (const rate of rates) runs.push(await measureOpen(rate));
      const sustained = runs.filter((r) => r.sustained).map((r) => r.offered);
      const maxSustained = sustained.length ? Math.max(...sustained) : 0;
      // Rounded to 10 req/s (1,000 users/s at 100 per request), at least 10.
      const halfRate = Math.max(10, Math.round(maxSustained / 2 / 10) * 10);
      const half = maxSustained === 0
        ? undefined
        : runs.find((r) => r.offered === halfRate) ?? await measureOpen(halfRate);
      open = {
        usersPerRequest: PROFILED_BATCH,
        closedLoopRequests: closed.requestsPerSecond,
        runs,
        maxSustainedUsers: maxSustained * PROFILED_BATCH,
        ...(half === undefined ? {} : { half }),
        queueMaxLength: Number(env.QUEUE_MAX_LENGTH),
        redisTimeoutMs: Number(env.REDIS_TIMEOUT_MS),
      };
    }
    const profile = plan.profileSeconds > 0
      ? await profileApi(env, bodyDir, plan, options.workDir)
      : undefined;
    if (profile) {
      progress.step(
        `profiled one API replica for ${plan.profileSeconds} s under batches of ${PROFILED_BATCH}`,
      );
    }
    return {
      plan,
      generator: options.generator,
      single,
      batches,
      ...(profile ? { profile } : {}),
      ...(open ? { open } : {}),
    };
  } finally {
    redis.disconnect();
    await sql.end({ timeout: 5 });
    await Deno.remove(bodyDir, { recursive: true }).catch(() => {});
  }
}
