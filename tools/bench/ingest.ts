/**
 * Phase 1, ingest: how many `POST /users` one API process answers with 202,
 * in queue mode, next to two references measured in the same run and
 * interleaved with it round by round (so drift on a shared machine hits all
 * three alike): the same app with an `accept` that does nothing (the HTTP
 * limit of this runtime for this request) and the API in direct mode (the
 * course's baseline, one INSERT per request).
 *
 * @module
 */

import { REPO_DIR } from "../harness/repo.ts";
import { type BenchServices, freshQueueName } from "./bench_services.ts";
import { type ProfileSummary, summariseProfileDir } from "./cpu_profile.ts";
import { type ApiProcess, REFERENCE_SERVER_COMMAND, startApi, taskCommand } from "./deno_task.ts";
import { runK6 } from "./k6.ts";
import { readCpuSeconds } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";
import { runWrk, type WrkResult } from "./wrk.ts";

/** The three servers measured. */
export type IngestTarget = "reference" | "queue" | "direct";

/** Sizes of the ingest phase. */
export interface IngestPlan {
  /** Rounds of reference → queue → direct. */
  readonly rounds: number;
  /** Unmeasured load before each measurement (JIT, pools). */
  readonly warmupSeconds: number;
  readonly seconds: number;
  /** wrk's connections: requests in flight. */
  readonly connections: number;
  /** Length of the k6-versus-wrk check on the reference; 0 skips it. */
  readonly k6CheckSeconds: number;
  /** Length of the profiled queue-mode run; 0 skips it. */
  readonly profileSeconds: number;
}

/** One measurement of one target. */
export interface IngestRun extends WrkResult {
  /** CPU the server process used during the run, in cores (1 = one core busy). */
  readonly serverCores: number;
  /** CPU Redis used during the run, in cores. */
  readonly redisCores: number;
  /** CPU PostgreSQL used during the run, in cores. */
  readonly postgresCores: number;
  /** Users found queued (or stored) after the run, to check every 202 was kept. */
  readonly kept: number;
}

/** Everything the ingest phase measured. */
export interface IngestResult {
  readonly plan: IngestPlan;
  readonly runs: Readonly<Record<IngestTarget, readonly IngestRun[]>>;
  /** Median of the per-round ratios of queue to reference req/s. */
  readonly queueRatio: number;
  /** Median of the per-round ratios of direct to reference req/s. */
  readonly directRatio: number;
  /**
   * k6 (closed model, as many VUs as wrk's connections) on the reference, next
   * to wrk, in req/s, with the k6 thresholds it crossed.
   */
  readonly k6Check?: {
    readonly k6: number;
    readonly wrk: number;
    readonly crossed?: readonly string[];
  };
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

/** The run with the median req/s (the lower middle one for an even count). */
export function medianRun<T extends { requestsPerSecond: number }>(runs: readonly T[]): T {
  const sorted = runs.toSorted((a, b) => a.requestsPerSecond - b.requestsPerSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

const SCRIPT = `${REPO_DIR}/tools/bench/post_users.lua`;

interface Server {
  readonly target: IngestTarget;
  readonly process: ApiProcess;
  readonly url: string;
}

async function startServer(
  services: BenchServices,
  target: IngestTarget,
  queueName: string,
  cpuProfileDir?: string,
): Promise<Server> {
  const command = target === "reference" ? REFERENCE_SERVER_COMMAND : taskCommand("server");
  const process = await startApi(`api-${target}`, command, {
    env: services.serviceEnv({
      API_MODE: target === "direct" ? "direct" : "queue",
      QUEUE_NAME: queueName,
      QUEUE_MAX_LENGTH: "100000000",
    }),
    cpuProfileDir,
  });
  return { target, process, url: process.url };
}

async function measure(
  services: BenchServices,
  server: Server,
  plan: IngestPlan,
  queueName: string,
): Promise<IngestRun> {
  await runWrk(`${server.url}/users`, {
    script: SCRIPT,
    seconds: plan.warmupSeconds,
    connections: plan.connections,
  });
  await services.redis.del(queueName);
  if (server.target === "direct") await services.resetTable();
  const cpuBefore = (await readCpuSeconds(server.process.pid)) ?? 0;
  const serversBefore = await services.serverCpuSeconds();
  const result = await runWrk(`${server.url}/users`, {
    script: SCRIPT,
    seconds: plan.seconds,
    connections: plan.connections,
  });
  const cpu = ((await readCpuSeconds(server.process.pid)) ?? 0) - cpuBefore;
  const serversAfter = await services.serverCpuSeconds();
  const kept = server.target === "queue"
    ? await services.redis.llen(queueName)
    : server.target === "direct"
    ? await services.rowCount()
    : 0;
  return {
    ...result,
    serverCores: cpu / result.seconds,
    redisCores: (serversAfter.redis - serversBefore.redis) / result.seconds,
    postgresCores: (serversAfter.postgres - serversBefore.postgres) / result.seconds,
    kept,
  };
}

function describe(target: IngestTarget, run: IngestRun): string {
  const errors = run.non2xx + run.socketErrors;
  return `${target.padEnd(9)} ${formatCount(run.requestsPerSecond).padStart(7)} req/s  p50 ${
    run.latencyMs.p50.toFixed(2)
  } ms  p99 ${run.latencyMs.p99.toFixed(2)} ms  errors ${errors}  ${
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
): Promise<IngestResult> {
  const queueName = freshQueueName("ingest");
  const targets: IngestTarget[] = ["reference", "queue", "direct"];
  progress.step(
    `wrk, ${plan.connections} connections, ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up, ${plan.rounds} round(s)`,
  );
  const servers = await Promise.all(
    targets.map((target) => startServer(services, target, queueName)),
  );
  const runs: Record<IngestTarget, IngestRun[]> = { reference: [], queue: [], direct: [] };
  let k6Check: IngestResult["k6Check"];
  try {
    for (let round = 1; round <= plan.rounds; round++) {
      for (const server of servers) {
        const run = await measure(services, server, plan, queueName);
        runs[server.target].push(run);
        progress.step(`round ${round}: ${describe(server.target, run)}`);
      }
    }
    if (plan.k6CheckSeconds > 0) {
      const reference = servers[0]!;
      const k6 = await runK6(reference.url, {
        vus: plan.connections,
        seconds: plan.k6CheckSeconds,
      });
      const wrk = median(runs.reference.map((run) => run.requestsPerSecond));
      k6Check = { k6: k6.requests / k6.seconds, wrk, crossed: k6.crossed ?? [] };
      progress.step(
        `load generator check on the reference: k6 ${formatCount(k6Check.k6)} req/s, wrk ${
          formatCount(wrk)
        } req/s`,
      );
    }
  } finally {
    await Promise.all(servers.map((server) => server.process.stop()));
  }
  await services.redis.del(queueName);

  let profile: ProfileSummary | undefined;
  if (plan.profileSeconds > 0) {
    const dir = await Deno.makeTempDir({ dir: workDir, prefix: "api-profile-" });
    const server = await startServer(services, "queue", queueName, dir);
    try {
      await runWrk(`${server.url}/users`, {
        script: SCRIPT,
        seconds: plan.profileSeconds,
        connections: plan.connections,
      });
    } finally {
      await server.process.stop();
    }
    await services.redis.del(queueName);
    profile = await summariseProfileDir(dir, { repoUrl: `file://${REPO_DIR}/`, top: 12 });
    progress.step(`profiled the queue-mode API for ${plan.profileSeconds} s under wrk`);
  }

  const ratios = (target: IngestTarget) =>
    median(
      runs[target].map((run, i) => run.requestsPerSecond / runs.reference[i]!.requestsPerSecond),
    );
  const result = {
    plan,
    runs,
    queueRatio: ratios("queue"),
    directRatio: ratios("direct"),
    k6Check,
    profile,
  };
  progress.step(
    `queue mode: ${(result.queueRatio * 100).toFixed(0)}% of the reference; direct mode: ${
      (result.directRatio * 100).toFixed(0)
    }%`,
  );
  return result;
}
