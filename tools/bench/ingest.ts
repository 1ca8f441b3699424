/**
 * Phase 1, ingest: how many `POST /users` one API process answers with 202
 * under oha in closed loop (as fast as answers come back), in queue mode,
 * next to servers measured in the same run and interleaved with it round by
 * round (so drift on a shared machine hits them all alike): the HTTP floor
 * (`http_floor.ts`: `Deno.serve` + Hono answering 202, nothing else), which
 * queue mode is read against; the course's own producer
 * (`course_producer.ts`: a bare LPUSH); and two diagnostics that no target
 * is read against: the API's app without Redis (`reference_server.ts`,
 * which splits our cost between the app and the queue) and the same app in
 * direct mode (`direct_server.ts`: the course's first version, one INSERT per
 * request).
 *
 * @module
 */

import { REPO_DIR } from "@users-pipeline/harness/repo";
import { type BenchServices, freshQueueName } from "./bench_services.ts";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";
import { type ProfileSummary, summariseProfileDir } from "./cpu_profile.ts";
import {
  type ApiProcess,
  COURSE_PRODUCER_COMMAND,
  DIRECT_SERVER_COMMAND,
  HTTP_FLOOR_COMMAND,
  REFERENCE_SERVER_COMMAND,
  startApi,
  taskCommand,
} from "./deno_task.ts";
import { type LoadResult, runOha } from "./oha.ts";
import { readCpuSeconds } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";

/**
 * The servers measured, in the order each round runs them: the queue mode
 * next to the floor and the course's producer it is read against, then the
 * diagnostics, direct mode last (its INSERTs leave PostgreSQL work behind
 * that should not land in the others' runs).
 */
export const INGEST_TARGETS = ["floor", "queue", "course", "no_redis", "direct"] as const;

/** One of the servers measured. */
export type IngestTarget = typeof INGEST_TARGETS[number];

/** Every run of every target measured, round by round. */
export type IngestRuns = Readonly<Record<IngestTarget, readonly IngestRun[]>>;

/** Sizes of the ingest phase. */
export interface IngestPlan {
  /** Rounds of every target in {@linkcode INGEST_TARGETS}' order. */
  readonly rounds: number;
  /** Unmeasured load before each measurement (JIT, pools). */
  readonly warmupSeconds: number;
  readonly seconds: number;
  /** oha's connections: requests in flight. */
  readonly connections: number;
  /** Length of the profiled queue-mode run; 0 skips it. */
  readonly profileSeconds: number;
}

/** One measurement of one target. */
export interface IngestRun extends LoadResult {
  /** Answers per second, over the generator's run. */
  readonly requestsPerSecond: number;
  /** CPU the server process used during the run, in cores (1 = one core busy). */
  readonly serverCores: number;
  /** CPU Redis used during the run, in cores. */
  readonly redisCores: number;
  /** CPU PostgreSQL used during the run, in cores. */
  readonly postgresCores: number;
  /**
   * Users found queued (or stored, in direct mode) after the run, to check
   * every 202 was kept; 0 for the floor and the app without Redis, which keep nothing.
   */
  readonly kept: number;
}

/** Everything the ingest phase measured. */
export interface IngestResult {
  readonly plan: IngestPlan;
  /** The load generator and its version (`oha 1.16.0`). */
  readonly generator: string;
  readonly runs: IngestRuns;
  /** Median of the per-round ratios of queue to HTTP floor req/s. */
  readonly queueRatio: number;
  /** Median of the per-round ratios of direct to HTTP floor req/s. */
  readonly directRatio: number;
  /**
   * Median of the per-round ratios of queue to the course's producer req/s
   * (queue ÷ course: above 1 is faster than the course).
   */
  readonly courseRatio: number;
  /** Where the queue-mode API spent its CPU. */
  readonly profile?: ProfileSummary;
}

/** The median of `values` (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = values.toSorted((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/**
 * The median over rounds of `runs[i]` ÷ `against[i]` in req/s: each round's
 * two runs are seconds apart, so drift on the machine cancels in the ratio.
 * Rounds missing from either side are left out.
 */
export function pairedRatio(
  runs: readonly { requestsPerSecond: number }[],
  against: readonly { requestsPerSecond: number }[],
): number {
  const rounds = Math.min(runs.length, against.length);
  return median(
    Array.from(
      { length: rounds },
      (_, i) => runs[i]!.requestsPerSecond / against[i]!.requestsPerSecond,
    ),
  );
}

/** A target's req/s as a share of the HTTP floor's (median of paired rounds). */
export function shareOfFloor(ingest: IngestResult, target: IngestTarget): number {
  if (target === "floor") return 1;
  if (target === "queue") return ingest.queueRatio;
  if (target === "direct") return ingest.directRatio;
  return pairedRatio(ingest.runs[target], ingest.runs.floor);
}

/** A CPU figure per request, in µs: the median over a target's runs. */
export function cpuMicrosPerRequest(
  runs: readonly IngestRun[],
  process: "serverCores" | "redisCores",
): number {
  return median(runs.map((r) => r[process] / r.requestsPerSecond * 1e6));
}

/**
 * The CPU one request costs the server and Redis together, in µs: the median
 * over a target's runs (a server that pushes less to Redis is not counted
 * cheaper for it).
 */
export function apiAndRedisMicrosPerRequest(runs: readonly IngestRun[]): number {
  return median(runs.map((r) => (r.serverCores + r.redisCores) / r.requestsPerSecond * 1e6));
}

/** The run with the median req/s (the lower middle one for an even count). */
export function medianRun<T extends { requestsPerSecond: number }>(runs: readonly T[]): T {
  const sorted = runs.toSorted((a, b) => a.requestsPerSecond - b.requestsPerSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

interface Server {
  readonly target: IngestTarget;
  readonly process: ApiProcess;
  readonly url: string;
  /** The Redis list it pushes to (its own, so each run counts only its users). */
  readonly queueName: string;
}

/** The commands that start each target but our API (the `server` task). */
const COMMANDS: Readonly<Record<Exclude<IngestTarget, "queue">, string>> = {
  floor: HTTP_FLOOR_COMMAND,
  no_redis: REFERENCE_SERVER_COMMAND,
  course: COURSE_PRODUCER_COMMAND,
  direct: DIRECT_SERVER_COMMAND,
};

async function startServer(
  services: BenchServices,
  target: IngestTarget,
  options: { cpuProfileDir?: string } = {},
): Promise<Server> {
  // The course's list is a constant in its code; every other server gets a list of its own.
  const queueName = target === "course" ? COURSE_QUEUE_NAME : freshQueueName(`ingest_${target}`);
  const command = target === "queue" ? taskCommand("server") : COMMANDS[target];
  const process = await startApi(`api-${target}`, command, {
    env: services.serviceEnv({
      QUEUE_NAME: queueName,
      QUEUE_MAX_LENGTH: "100000000",
    }),
    cpuProfileDir: options.cpuProfileDir,
  });
  return { target, process, url: process.url, queueName };
}

async function measure(
  services: BenchServices,
  server: Server,
  plan: IngestPlan,
): Promise<IngestRun> {
  const { queueName } = server;
  const url = `${server.url}/users`;
  await runOha(url, { seconds: plan.warmupSeconds, connections: plan.connections });
  await services.redis.del(queueName);
  if (server.target === "direct") await services.resetTable();
  const cpuBefore = (await readCpuSeconds(server.process.pid)) ?? 0;
  const serversBefore = await services.serverCpuSeconds();
  const result = await runOha(url, { seconds: plan.seconds, connections: plan.connections });
  const cpu = ((await readCpuSeconds(server.process.pid)) ?? 0) - cpuBefore;
  const serversAfter = await services.serverCpuSeconds();
  const kept = server.target === "floor" || server.target === "no_redis"
    ? 0
    : server.target === "direct"
    ? await services.rowCount()
    : await services.redis.llen(queueName);
  // Counted: the list goes, so Redis's memory and AOF rewrites stay small for the next runs.
  await services.redis.del(queueName);
  return {
    ...result,
    requestsPerSecond: result.requests / result.seconds,
    serverCores: cpu / result.seconds,
    redisCores: (serversAfter.redis - serversBefore.redis) / result.seconds,
    postgresCores: (serversAfter.postgres - serversBefore.postgres) / result.seconds,
    kept,
  };
}

function describe(target: IngestTarget, run: IngestRun): string {
  const errors = run.requests - run.accepted;
  return `${target.padEnd(9)} ${formatCount(run.requestsPerSecond).padStart(7)} req/s  p50 ${
    run.latencyMs.p50.toFixed(2)
  } ms  p99 ${run.latencyMs.p99.toFixed(2)} ms  non-202 ${errors}  ${
    (run.serverCores / run.requestsPerSecond * 1e6).toFixed(1)
  } µs CPU/request; cores: api ${run.serverCores.toFixed(2)}, redis ${
    run.redisCores.toFixed(2)
  }, postgres ${run.postgresCores.toFixed(2)}`;
}

/** Runs the ingest phase. */
export async function runIngest(
  services: BenchServices,
  plan: IngestPlan,
  progress: Progress,
  workDir: string,
  generator: string,
): Promise<IngestResult> {
  const targets = INGEST_TARGETS;
  progress.step(
    `oha closed loop, ${plan.connections} connections, ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up, ${plan.rounds} round(s) of ${
      targets.join(", ")
    }`,
  );
  const started = await Promise.allSettled(
    targets.map((target) => startServer(services, target)),
  );
  const servers = started.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed) {
    // Stop the ones that did start before reporting the one that did not.
    await Promise.all(servers.map((server) => server.process.stop()));
    throw failed.reason;
  }
  const runs: Record<IngestTarget, IngestRun[]> = Object.fromEntries(
    INGEST_TARGETS.map((t) => [t, []]),
  ) as unknown as Record<IngestTarget, IngestRun[]>;
  try {
    for (let round = 1; round <= plan.rounds; round++) {
      for (const server of servers) {
        const run = await measure(services, server, plan);
        runs[server.target].push(run);
        progress.step(`round ${round}: ${describe(server.target, run)}`);
      }
    }
  } finally {
    await Promise.all(servers.map((server) => server.process.stop()));
  }
  await services.redis.del(...servers.map((server) => server.queueName));

  let profile: ProfileSummary | undefined;
  if (plan.profileSeconds > 0) {
    const dir = await Deno.makeTempDir({ dir: workDir, prefix: "api-profile-" });
    const server = await startServer(services, "queue", { cpuProfileDir: dir });
    try {
      await runOha(`${server.url}/users`, {
        seconds: plan.profileSeconds,
        connections: plan.connections,
      });
    } finally {
      await server.process.stop();
    }
    await services.redis.del(server.queueName);
    profile = await summariseProfileDir(dir, { repoUrl: `file://${REPO_DIR}/`, top: 12 });
    progress.step(`profiled the queue-mode API for ${plan.profileSeconds} s under oha`);
  }

  const result: IngestResult = {
    plan,
    generator,
    runs,
    queueRatio: pairedRatio(runs.queue, runs.floor),
    directRatio: pairedRatio(runs.direct, runs.floor),
    courseRatio: pairedRatio(runs.queue, runs.course),
    profile,
  };
  progress.step(
    `queue mode: ${(result.queueRatio * 100).toFixed(0)}% of the HTTP floor, ${
      result.courseRatio.toFixed(2)
    }× the course's producer's req/s, ${
      (apiAndRedisMicrosPerRequest(runs.queue) / apiAndRedisMicrosPerRequest(runs.course))
        .toFixed(2)
    }× its API + Redis CPU per request; direct mode: ${
      (result.directRatio * 100).toFixed(0)
    }% of the HTTP floor`,
  );
  return result;
}
