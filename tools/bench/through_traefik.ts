/**
 * Phase "traefik": ingest through the same Traefik the stack runs, against
 * the course's own producer behind the same Traefik. Three setups, each behind a
 * Traefik of its own configured as the native stack's (traefik_front.ts),
 * loaded by oha in closed loop (as fast as answers come back) and taking
 * turns round by round, so drift on a shared machine hits them alike:
 *
 * - `ceiling`: the HTTP floor (`http_floor.ts`: `Deno.serve` + Hono answering
 *   202, nothing else) in as many replicas as the stack runs API replicas:
 *   what Traefik itself passes on this machine, the end-to-end ladder's top
 *   rate;
 * - `queue`: our API at the stack's defaults (project.env's settings, the
 *   stack's number of replicas), queue mode;
 * - `course`: the course's producer (course_producer.ts), one replica as in
 *   the course.
 *
 * For each: req/s, latency, and the CPU each process used per request
 * (oha, Traefik, the API replicas, Redis), the figure the capacity model
 * (capacity.ts) scales. Every 202 must be in the list afterwards.
 *
 * @module
 */

import { type BenchServices, freshQueueName } from "./bench_services.ts";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";
import {
  type ApiProcess,
  COURSE_PRODUCER_COMMAND,
  HTTP_FLOOR_COMMAND,
  startApi,
  taskCommand,
} from "./deno_task.ts";
import { median, pairedRatio } from "./ingest.ts";
import { type LoadResult, runOha } from "./oha.ts";
import { readTreeCpuSeconds } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";
import { startTraefikFront, type TraefikFront } from "./traefik_front.ts";

/** The setups measured, in the order each round runs them. */
export const FRONT_TARGETS = ["ceiling", "queue", "course"] as const;

/** One of the setups. */
export type FrontTarget = typeof FRONT_TARGETS[number];

/** The processes whose CPU each run reads. */
export const FRONT_PARTS = ["generator", "traefik", "api", "redis"] as const;

/** One of those processes (`api`: every replica of the setup's server). */
export type FrontPart = typeof FRONT_PARTS[number];

/** Sizes of the phase. */
export interface TraefikPlan {
  /** Rounds of every setup; 0 skips the phase. */
  readonly rounds: number;
  /** Unmeasured load before each measurement. */
  readonly warmupSeconds: number;
  readonly seconds: number;
  /** oha's connections. */
  readonly connections: number;
  /** API replicas of `ceiling` and `queue`: the stack's default number. */
  readonly replicas: number;
}

/** One measurement of one setup. */
export interface FrontRun extends LoadResult {
  /** Answers per second, over oha's run. */
  readonly requestsPerSecond: number;
  /** CPU each process used during the run, in cores. */
  readonly cores: Readonly<Record<FrontPart, number>>;
  /** Users in the setup's list afterwards (0 for the ceiling: the floor keeps nothing). */
  readonly kept: number;
  /**
   * Each of our API replicas' count of users accepted since it started
   * (`users_pipeline_users_accepted_total`, warm-up included), so a 202 not
   * kept can be traced to the replica that gave it.
   */
  readonly acceptedByReplica?: readonly number[];
}

/** Everything the phase measured. */
export interface TraefikResult {
  readonly plan: TraefikPlan;
  readonly runs: Readonly<Record<FrontTarget, readonly FrontRun[]>>;
  /** Median req/s of the ceiling runs: what Traefik passes to the HTTP floor. */
  readonly ceiling: number;
  /** Median of per-round queue ÷ course req/s (the target: ≥ 1). */
  readonly courseRatio: number;
  /** Median of per-round queue ÷ ceiling req/s. */
  readonly ceilingRatio: number;
}

/** CPU µs per request of `part`, the median over `runs`. */
export function frontMicrosPerRequest(runs: readonly FrontRun[], part: FrontPart): number {
  return median(runs.map((r) => r.cores[part] / r.requestsPerSecond * 1e6));
}

interface Setup {
  readonly target: FrontTarget;
  readonly servers: readonly ApiProcess[];
  readonly front: TraefikFront;
  /** The list its servers push to; none for the ceiling. */
  readonly queueName?: string;
}

async function startSetup(
  services: BenchServices,
  target: FrontTarget,
  replicas: number,
): Promise<Setup> {
  const queueName = target === "ceiling"
    ? undefined
    : target === "course"
    ? COURSE_QUEUE_NAME
    : freshQueueName("traefik_queue");
  const command = target === "ceiling"
    ? HTTP_FLOOR_COMMAND
    : target === "course"
    ? COURSE_PRODUCER_COMMAND
    : taskCommand("server");
  const count = target === "course" ? 1 : replicas;
  const started = await Promise.allSettled(
    Array.from({ length: count }, (_, i) =>
      startApi(`${target}-${i + 1}`, command, {
        env: services.serviceEnv({
          ...(queueName === undefined ? {} : { QUEUE_NAME: queueName }),
          // The bound is not what is measured here: far above what a run sends.
          QUEUE_MAX_LENGTH: "100000000",
          REPLICA_ID: `${target}-${i + 1}`,
        }),
      })),
  );
  const servers = started.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed) {
    await Promise.all(servers.map((s) => s.stop()));
    throw failed.reason;
  }
  try {
    const front = await startTraefikFront(target, servers.map((s) => s.url));
    return { target, servers, front, ...(queueName === undefined ? {} : { queueName }) };
  } catch (error) {
    await Promise.all(servers.map((s) => s.stop()));
    throw error;
  }
}

async function stopSetup(setup: Setup): Promise<void> {
  await setup.front.stop();
  await Promise.all(setup.servers.map((s) => s.stop()));
}

async function measure(
  services: BenchServices,
  setup: Setup,
  plan: TraefikPlan,
): Promise<FrontRun> {
  const url = `${setup.front.url}/users`;
  const options = { seconds: plan.warmupSeconds, connections: plan.connections };
  await runOha(url, options);
  if (setup.queueName) await services.redis.del(setup.queueName);
  const roots = [
    setup.front.pid,
    ...setup.servers.map((s) => s.pid),
    services.redisServer.server.pid ?? 0,
  ];
  const cpu = async () => {
    const seconds = await readTreeCpuSeconds(roots);
    return {
      traefik: seconds[0] ?? 0,
      api: seconds.slice(1, -1).reduce((sum, s) => sum + s, 0),
      redis: seconds.at(-1) ?? 0,
    };
  };
  const before = await cpu();
  const load = await runOha(url, { ...options, seconds: plan.seconds });
  const after = await cpu();
  const kept = setup.queueName ? await services.redis.llen(setup.queueName) : 0;
  if (setup.queueName) await services.redis.del(setup.queueName);
  const acceptedByReplica = setup.target === "queue"
    ? await Promise.all(setup.servers.map((server) => acceptedTotal(server.url)))
    : undefined;
  const seconds = load.seconds;
  return {
    ...load,
    requestsPerSecond: load.requests / seconds,
    cores: {
      generator: (load.cpuSeconds ?? 0) / seconds,
      traefik: (after.traefik - before.traefik) / seconds,
      api: (after.api - before.api) / seconds,
      redis: (after.redis - before.redis) / seconds,
    },
    kept,
    ...(acceptedByReplica === undefined ? {} : { acceptedByReplica }),
  };
}

/** An API's `users_pipeline_users_accepted_total`, from its `/metrics`. */
async function acceptedTotal(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(
    /^users_pipeline_users_accepted_total(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1] ?? NaN,
  );
}

function describe(target: FrontTarget, run: FrontRun): string {
  const micros = (part: FrontPart) => (run.cores[part] / run.requestsPerSecond * 1e6).toFixed(1);
  return `${target.padEnd(8)} ${formatCount(run.requestsPerSecond).padStart(7)} req/s  p50 ${
    run.latencyMs.p50.toFixed(2)
  } ms  p99 ${run.latencyMs.p99.toFixed(2)} ms  non-202 ${
    run.requests - run.accepted
  }; CPU µs/request: oha ${micros("generator")}, traefik ${micros("traefik")}, api ${
    micros("api")
  }, redis ${micros("redis")}${
    target === "ceiling" ? "" : `; ${run.kept} users queued for ${run.accepted} 202s`
  }`;
}

/** Runs the phase. */
export async function runThroughTraefik(
  services: BenchServices,
  plan: TraefikPlan,
  progress: Progress,
): Promise<TraefikResult> {
  progress.step(
    `oha closed loop, ${plan.connections} connections, ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up, ${plan.rounds} round(s) of ${
      FRONT_TARGETS.join(", ")
    }; each behind its own Traefik (the native stack's configuration); ${plan.replicas} replicas of the HTTP floor and of our API, 1 of the course's producer`,
  );
  const started = await Promise.allSettled(
    FRONT_TARGETS.map((target) => startSetup(services, target, plan.replicas)),
  );
  const setups = started.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
  const runs: Record<FrontTarget, FrontRun[]> = { ceiling: [], queue: [], course: [] };
  try {
    if (failed) throw failed.reason;
    for (let round = 1; round <= plan.rounds; round++) {
      for (const setup of setups) {
        const run = await measure(services, setup, plan);
        runs[setup.target].push(run);
        progress.step(`round ${round}: ${describe(setup.target, run)}`);
      }
    }
  } finally {
    await Promise.all(setups.map(stopSetup));
  }
  const result: TraefikResult = {
    plan,
    runs,
    ceiling: median(runs.ceiling.map((r) => r.requestsPerSecond)),
    courseRatio: pairedRatio(runs.queue, runs.course),
    ceilingRatio: pairedRatio(runs.queue, runs.ceiling),
  };
  progress.step(
    `through Traefik: our API ${result.courseRatio.toFixed(2)}× the course's producer, ${
      (result.ceilingRatio * 100).toFixed(0)
    }% of Traefik's ceiling (${formatCount(result.ceiling)} req/s)`,
  );
  return result;
}
