/**
 * Phase 2, drain: how fast consumers move a preloaded backlog into table
 * `users`, in single mode and in batch mode (1 and 2 replicas, several
 * BATCH_SIZEs), next to a floor measured in the same run: the same rows
 * inserted from memory by this process, 1000 per statement, over as many
 * connections as a consumer opens (two), with a statement and an overlap of
 * its own — the unnest insert that skips stored ids, its arrays built before
 * the clock starts, and the best of 1 to 4 statements in flight — which is
 * what the database takes from this runtime without any queue. Nothing of it
 * follows the consumer's code, so a change to the consumer moves the
 * consumer's figure and never its reference; a consumer that beats the floor
 * means the floor is wrong.
 *
 * A drain is timed from the moment the first consumer takes its first batch
 * (so process start-up is not counted) to the moment the queue and every
 * processing list are empty, which is after the last batch was committed and
 * acknowledged; then the users stored and dead-lettered are counted, for the
 * check that every one was stored (checks.ts).
 *
 * @module
 */

import postgres from "postgres";
import { queueKeys, ShardedQueue, type UserEnvelope } from "@users-pipeline/queue";
import { depthOf } from "@users-pipeline/harness/queue_fill";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { waitFor } from "@users-pipeline/harness/wait";
import { benchPostgresOptions, type BenchServices, freshQueueName } from "./bench_services.ts";
import { type ProfileSummary, summariseProfileDir } from "./cpu_profile.ts";
import { COURSE_TABLE } from "./course_consumer.ts";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";
import {
  consumerEnv,
  COURSE_CONSUMER_COMMAND,
  startDenoProcess,
  taskCommand,
} from "./deno_task.ts";
import { benchUsers, preloadQueue } from "./preload.ts";
import { peakMiB, readTreeCpuSeconds, type RssSample, sampleRss } from "./process_stats.ts";
import { formatCount, type Progress } from "./progress.ts";

/** How the consumers of one drain run; `course` is the course's own consumer (course_consumer.ts). */
export interface DrainSetup {
  readonly mode: "single" | "batch" | "course";
  /** Rows per statement in batch mode. */
  readonly batchSize: number;
  readonly replicas: number;
  readonly users: number;
}

/** One timed drain. */
export interface DrainRun extends DrainSetup {
  readonly seconds: number;
  readonly rowsPerSecond: number;
  /** The largest resident memory of any replica during the drain. */
  readonly peakRssMiB: number;
  /** Every RSS sample of the first replica. */
  readonly rssSamples: readonly RssSample[];
  /** Users of the backlog found in the table once the queue was empty. */
  readonly stored: number;
  /** Users in the dead-letter list once the queue was empty. */
  readonly deadLettered: number;
  /** CPU the consumers used during the drain, in cores. */
  readonly consumerCores: number;
  /** CPU PostgreSQL used during the drain, in cores. */
  readonly postgresCores: number;
  /** CPU Redis used during the drain, in cores. */
  readonly redisCores: number;
  /** Seconds the preload took (not part of the drain). */
  readonly preloadSeconds: number;
  /**
   * Redis memory (INFO `used_memory`) the backlog took, per queued user: the
   * list and the status index.
   */
  readonly redisBytesPerUser: number;
  /**
   * PostgreSQL's WAL written during the drain, per row (pg_current_wal_lsn
   * before and after).
   */
  readonly walBytesPerUser: number;
}

/** One timed floor insert: the fastest of its overlaps. */
export interface FloorRun {
  readonly users: number;
  readonly batch: number;
  /** Statements in flight at once over {@linkcode FLOOR_CONNECTIONS} connections. */
  readonly overlap: number;
  readonly seconds: number;
  readonly rowsPerSecond: number;
  /** Every overlap tried, with its rows/s. */
  readonly tried?: readonly { readonly overlap: number; readonly rowsPerSecond: number }[];
}

/** Sizes of the drain phase. */
export interface DrainPlan {
  /** Backlog of each batch-mode drain and of the floor. */
  readonly users: number;
  /** Backlog of the single-mode drain (single mode stores ~1 row per round trip). */
  readonly singleUsers: number;
  readonly batchSizes: readonly number[];
  readonly replicas: readonly number[];
  /** Backlog of the profiled batch drain (BATCH_SIZE 1000, 1 replica); 0 skips it. */
  readonly profileUsers: number;
}

/** Everything the drain phase measured. */
export interface DrainResult {
  readonly plan: DrainPlan;
  /** Before and after the consumers' runs, to see drift. */
  readonly floors: readonly FloorRun[];
  /** The mean of the floors' rows/s. */
  readonly floorRowsPerSecond: number;
  readonly single: DrainRun;
  /** The course's consumer on the same backlog as single mode, right after it. */
  readonly course: DrainRun;
  readonly batch: readonly DrainRun[];
  readonly profile?: ProfileSummary;
  /** A consumer in single mode, profiled on the single-mode backlog. */
  readonly singleProfile?: ProfileSummary;
}

/** The rows per statement of the floor: the consumer's default BATCH_SIZE. */
export const FLOOR_BATCH = 1_000;

/** The floor's connections: as many as one consumer opens to PostgreSQL. */
export const FLOOR_CONNECTIONS = 2;

/**
 * The statements in flight the floor tries, keeping the fastest: one at a
 * time, one per connection, and postgres.js queueing one or two more behind
 * them, so a freed connection starts the next at once. Fixed, whatever the
 * consumer keeps ahead: the floor's best effort, not the consumer's choice.
 */
export const FLOOR_OVERLAPS = [1, 2, 3, 4] as const;

/** Options of {@linkcode timeDrain}. */
export interface TimeDrainOptions {
  /** Write the consumers' CPU profiles into this dir. @default none */
  cpuProfileDir?: string;
  /** How often the replicas' memory is sampled. @default 250 */
  rssIntervalMs?: number;
}

/**
 * Rows a drain's warm-up stores before the timed drain: two batches per
 * replica (at least 1000; 200 in single mode), so that the consumers have
 * connected, prepared their statement and compiled their hot code.
 */
export function warmupUsers(setup: Pick<DrainSetup, "mode" | "batchSize" | "replicas">): number {
  return setup.mode === "single" ? 200 : Math.max(1_000, 2 * setup.batchSize * setup.replicas);
}

/** What a drain's queue holds, read by {@linkcode readDrain}. */
export interface DrainReading {
  /** Whether the queue and every processing list are empty. */
  readonly empty: boolean;
  /** Users of the timed backlog taken so far: what the RSS samples count as done. */
  readonly taken: number;
}

/**
 * Reads a drain's queue. `backlog` is the number of users handed over for the
 * timed drain, undefined before (during the warm-up), when the queue holds
 * other users and none of the backlog's is taken: counting the warm-up's as
 * the backlog's would date a warm-up sample in the drain's second half.
 */
export async function readDrain(
  queue: { depth(): Promise<{ queued: number; processing: number }> },
  backlog: number | undefined,
): Promise<DrainReading> {
  const depth = await queue.depth();
  return {
    empty: depth.queued + depth.processing === 0,
    taken: backlog === undefined ? 0 : backlog - depth.queued,
  };
}

/**
 * Starts the consumers, warms them up, then hands them `setup.users` queued
 * users at once and times them until every one is stored.
 *
 * The backlog is pushed to a staging list while the consumers idle and then
 * RENAMEd onto the queue (one atomic step), so the drain starts with the
 * whole backlog in place and warm consumers; it is timed from the first
 * batch taken until the queue and every processing list are empty.
 */
export async function timeDrain(
  services: BenchServices,
  setup: DrainSetup & { readonly mode: "single" | "batch" },
  options: TimeDrainOptions = {},
): Promise<DrainRun> {
  const name = freshQueueName("drain");
  const staging = `${name}:staging`;
  const keys = queueKeys(name);
  const queue = new ShardedQueue(services.redis, { keys: [keys] });
  const lists = { depth: () => depthOf(services.redis, keys) };
  await services.resetTable();
  const consumers = Array.from(
    { length: setup.replicas },
    (_, i) =>
      startDenoProcess(`consumer-${i + 1}`, taskCommand("consumer"), {
        env: consumerEnv(services.serviceEnv({
          QUEUE_NAME: name,
          CONSUMER_MODE: setup.mode,
          BATCH_SIZE: String(setup.batchSize),
        })),
        cpuProfileDir: options.cpuProfileDir,
      }),
  );
  let taken = 0;
  const samplers = consumers.map((c) =>
    sampleRss(c.pid, options.rssIntervalMs ?? 250, () => taken)
  );
  const alive = () => {
    const dead = consumers.find((c) => !c.process.running);
    if (dead) throw new Error(`${dead.name} exited during the drain:\n${dead.output.tail(20)}`);
  };
  const cpu = async () =>
    (await readTreeCpuSeconds(consumers.map((c) => c.pid))).reduce((sum, s) => sum + s, 0);
  const drained = async () => {
    alive();
    const reading = await readDrain(lists, setup.users);
    taken = reading.taken;
    return reading.empty;
  };
  try {
    const warmup = warmupUsers(setup);
    await preloadQueue(queue, warmup);
    await waitFor("the warm-up to be stored", async () => {
      alive();
      return (await services.rowCount()) === warmup && (await readDrain(lists, undefined)).empty;
    }, { intervalMs: 20, timeoutMs: 120_000 });
    await services.sql`checkpoint`;
    const memoryBefore = await services.redisUsedMemory();
    const preloadSeconds = await preloadQueue(
      new ShardedQueue(services.redis, { keys: [queueKeys(staging)] }),
      setup.users,
    );
    const redisBytesPerUser = ((await services.redisUsedMemory()) - memoryBefore) / setup.users;
    // The status index moves with the backlog, so the consumers keep it as they do in production.
    await services.redis.multi().rename(staging, name)
      .rename(queueKeys(staging).queuedIds, keys.queuedIds).exec();
    await waitFor("the first batch to be taken", async () => {
      alive();
      return (await services.redis.llen(name)) < setup.users;
    }, { intervalMs: 5, timeoutMs: 60_000 });
    const started = performance.now();
    const [cpuStart, serversStart, walStart] = await Promise.all([
      cpu(),
      services.serverCpuSeconds(),
      services.walPosition(),
    ]);
    await waitFor("the backlog to be stored", drained, {
      intervalMs: 5,
      timeoutMs: Math.max(120_000, setup.users / 100 * 1_000),
    });
    const finished = performance.now();
    const [cpuEnd, serversEnd, walEnd] = await Promise.all([
      cpu(),
      services.serverCpuSeconds(),
      services.walPosition(),
    ]);
    const seconds = (finished - started) / 1_000;
    const samples = await Promise.all(samplers.map((s) => s.stop()));
    const stored = (await services.rowCount()) - warmup;
    const depth = await lists.depth();
    return {
      ...setup,
      stored,
      deadLettered: depth.dead,
      seconds,
      rowsPerSecond: setup.users / seconds,
      peakRssMiB: Math.max(...samples.map(peakMiB)),
      rssSamples: samples[0] ?? [],
      consumerCores: (cpuEnd - cpuStart) / seconds,
      postgresCores: (serversEnd.postgres - serversStart.postgres) / seconds,
      redisCores: (serversEnd.redis - serversStart.redis) / seconds,
      preloadSeconds,
      redisBytesPerUser,
      walBytesPerUser: (walEnd - walStart) / setup.users,
    };
  } finally {
    await Promise.all(samplers.map((s) => s.stop()));
    await Promise.all(consumers.map((c) => c.stop()));
    await services.redis.del(
      name,
      staging,
      keys.queuedIds,
      queueKeys(staging).queuedIds,
      keys.stats,
    );
  }
}

/** `count` items as the course's producer pushes them: `{ name }`, nothing else. */
function courseItems(count: number, first = 0): string[] {
  return Array.from(
    { length: count },
    (_, i) => JSON.stringify({ name: `bench user ${first + i}` }),
  );
}

/**
 * Times the course's consumer (course_consumer.ts) like {@linkcode timeDrain}
 * times ours: started and warmed up on a few hundred items, then `users`
 * items (the course's `{ name }`, LPUSHed 1000 at a time to a staging list)
 * RENAMEd onto the course's list in one step, timed from the first item
 * taken until the list is empty and the course's table holds every row (it
 * has no processing list: an item taken is in flight until its INSERT ends).
 */
export async function timeCourseDrain(
  services: BenchServices,
  users: number,
  options: Pick<TimeDrainOptions, "rssIntervalMs"> = {},
): Promise<DrainRun> {
  const name = COURSE_QUEUE_NAME;
  const staging = `${name}:staging`;
  const table = services.sql(COURSE_TABLE);
  const rows = async () => {
    const [row] = await services.sql<
      { count: number }[]
    >`select count(*)::int as count from ${table}`;
    return row?.count ?? 0;
  };
  await services.redis.del(name, staging);
  const consumer = startDenoProcess("course-consumer", COURSE_CONSUMER_COMMAND, {
    env: services.serviceEnv(),
  });
  let taken = 0;
  const sampler = sampleRss(consumer.pid, options.rssIntervalMs ?? 250, () => taken);
  const alive = () => {
    if (!consumer.process.running) {
      throw new Error(`${consumer.name} exited during the drain:\n${consumer.output.tail(20)}`);
    }
  };
  const push = async (key: string, count: number) => {
    for (let first = 0; first < count; first += 1_000) {
      await services.redis.lpush(key, ...courseItems(Math.min(1_000, count - first), first));
    }
  };
  try {
    // The consumer creates its table at start; the warm-up waits for that too.
    const warmup = 200;
    await push(name, warmup);
    await waitFor("the course's warm-up to be stored", async () => {
      alive();
      return (await services.redis.llen(name)) === 0 &&
        await rows().catch(() => 0) === warmup;
    }, { intervalMs: 20, timeoutMs: 120_000 });
    await services.sql`truncate ${table} restart identity`;
    await services.sql`checkpoint`;
    const memoryBefore = await services.redisUsedMemory();
    const preloadStart = performance.now();
    await push(staging, users);
    const preloadSeconds = (performance.now() - preloadStart) / 1_000;
    const redisBytesPerUser = ((await services.redisUsedMemory()) - memoryBefore) / users;
    await services.redis.rename(staging, name);
    await waitFor("the course's first item to be taken", async () => {
      alive();
      return (await services.redis.llen(name)) < users;
    }, { intervalMs: 5, timeoutMs: 60_000 });
    const started = performance.now();
    const cpu = async () => (await readTreeCpuSeconds([consumer.pid]))[0] ?? 0;
    const [cpuStart, serversStart, walStart] = await Promise.all([
      cpu(),
      services.serverCpuSeconds(),
      services.walPosition(),
    ]);
    await waitFor("the course's backlog to be stored", async () => {
      alive();
      taken = users - await services.redis.llen(name);
      return taken === users && await rows() === users;
    }, { intervalMs: 5, timeoutMs: Math.max(120_000, users / 100 * 1_000) });
    const finished = performance.now();
    const [cpuEnd, serversEnd, walEnd] = await Promise.all([
      cpu(),
      services.serverCpuSeconds(),
      services.walPosition(),
    ]);
    const seconds = (finished - started) / 1_000;
    const samples = await sampler.stop();
    return {
      mode: "course",
      batchSize: 1,
      replicas: 1,
      users,
      // Waited for above; the course has no dead letters.
      stored: await rows(),
      deadLettered: 0,
      seconds,
      rowsPerSecond: users / seconds,
      peakRssMiB: peakMiB(samples),
      rssSamples: samples,
      consumerCores: (cpuEnd - cpuStart) / seconds,
      postgresCores: (serversEnd.postgres - serversStart.postgres) / seconds,
      redisCores: (serversEnd.redis - serversStart.redis) / seconds,
      preloadSeconds,
      redisBytesPerUser,
      walBytesPerUser: (walEnd - walStart) / users,
    };
  } finally {
    await sampler.stop();
    await consumer.stop();
    await services.redis.del(name, staging);
    await services.sql`drop table if exists ${table}`;
  }
}

/**
 * Calls `run` on `items` in chunks of `size`, in order, keeping at most
 * `overlap` calls in flight: the next chunk is sent as soon as one call
 * finishes. Over a client of fewer connections, postgres.js queues a call
 * behind a running one, as it does the consumer's inserts, so a connection
 * freed by a commit starts the next statement at once.
 */
export async function runOverlapped<T>(
  items: readonly T[],
  options: { size: number; overlap: number },
  run: (chunk: T[]) => Promise<unknown>,
): Promise<void> {
  const { size, overlap } = options;
  const inFlight: Promise<unknown>[] = [];
  for (let i = 0; i < items.length; i += size) {
    if (inFlight.length === overlap) await inFlight.shift();
    inFlight.push(run(items.slice(i, i + size)));
  }
  await Promise.all(inFlight);
}

/** The fastest of the floor's runs (the first of equals). */
export function fastest(runs: readonly FloorRun[]): FloorRun {
  return runs.reduce((best, run) => run.rowsPerSecond > best.rowsPerSecond ? run : best);
}

/** One floor statement's arrays, built before the clock starts. */
interface FloorChunk {
  readonly ids: string[];
  readonly names: string[];
  readonly ms: number[];
}

function floorChunks(users: readonly UserEnvelope[]): FloorChunk[] {
  const chunks: FloorChunk[] = [];
  for (let i = 0; i < users.length; i += FLOOR_BATCH) {
    const rows = users.slice(i, i + FLOOR_BATCH);
    chunks.push({
      ids: rows.map((u) => u.id),
      names: rows.map((u) => u.name),
      ms: rows.map((u) => u.enqueued_at),
    });
  }
  return chunks;
}

/**
 * The drain floor: inserts `count` users from memory, {@linkcode FLOOR_BATCH}
 * rows per statement (the unnest insert that skips stored ids, as the
 * contract needs), over {@linkcode FLOOR_CONNECTIONS} connections, once with
 * each of {@linkcode FLOOR_OVERLAPS} statements in flight, and returns the
 * fastest.
 *
 * @throws {Error} when a run left other than `count` rows in the table.
 */
export async function timeFloorInsert(
  services: BenchServices,
  count: number,
): Promise<FloorRun> {
  const batch = FLOOR_BATCH;
  const sql = postgres(benchPostgresOptions(services.postgresServer.env, FLOOR_CONNECTIONS));
  const insert = (chunk: FloorChunk) =>
    sql`
      insert into users (id, name, enqueued_at)
      select id, name, to_timestamp(ms / 1000.0)
      from unnest(${chunk.ids}::uuid[], ${chunk.names}::text[], ${chunk.ms}::float8[]) as t(id, name, ms)
      on conflict (id) do nothing`;
  // One chunk per call: the chunks are whole statements already.
  const send = (chunks: FloorChunk[], overlap: number) =>
    runOverlapped(chunks, { size: 1, overlap }, ([chunk]) => insert(chunk!));
  const most = Math.max(...FLOOR_OVERLAPS);
  try {
    // Warm up: every connection open, the statement prepared, the code compiled.
    await send(floorChunks(benchUsers(batch * most * 2)), most);
    const chunks = floorChunks(benchUsers(count));
    const runs: FloorRun[] = [];
    for (const overlap of FLOOR_OVERLAPS) {
      await services.resetTable();
      const start = performance.now();
      await send(chunks, overlap);
      const seconds = (performance.now() - start) / 1_000;
      const stored = await services.rowCount();
      if (stored !== count) {
        throw new Error(`Cannot trust the drain floor: ${stored} of ${count} stored`);
      }
      runs.push({ users: count, batch, overlap, seconds, rowsPerSecond: count / seconds });
    }
    return {
      ...fastest(runs),
      tried: runs.map(({ overlap, rowsPerSecond }) => ({ overlap, rowsPerSecond })),
    };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** A short label for a drain setup: `single`, `batch 1000 × 2`. */
export function drainLabel(setup: Pick<DrainSetup, "mode" | "batchSize" | "replicas">): string {
  if (setup.mode === "course") return "the course's consumer";
  return setup.mode === "single" ? "single" : `batch ${setup.batchSize} × ${setup.replicas}`;
}

function describe(run: DrainRun, floor: number): string {
  return `${drainLabel(run).padEnd(15)} ${formatCount(run.users).padStart(9)} users in ${
    run.seconds.toFixed(2)
  } s: ${formatCount(run.rowsPerSecond).padStart(7)} rows/s (${
    (run.rowsPerSecond / floor * 100).toFixed(0)
  }% of the floor); cores: consumers ${run.consumerCores.toFixed(2)}, postgres ${
    run.postgresCores.toFixed(2)
  }, redis ${run.redisCores.toFixed(2)}; peak RSS ${run.peakRssMiB.toFixed(0)} MiB`;
}

/** Runs the drain phase. */
export async function runDrain(
  services: BenchServices,
  plan: DrainPlan,
  progress: Progress,
  workDir: string,
): Promise<DrainResult> {
  const floors: FloorRun[] = [];
  const floor = async () => {
    const run = await timeFloorInsert(services, plan.users);
    floors.push(run);
    progress.step(
      `floor           ${formatCount(run.users).padStart(9)} rows in ${run.seconds.toFixed(2)} s: ${
        formatCount(run.rowsPerSecond).padStart(7)
      } rows/s (an insert from memory, ${run.batch} per statement on ${FLOOR_CONNECTIONS} connections; in flight ${
        (run.tried ?? []).map((t) => `${t.overlap}: ${formatCount(t.rowsPerSecond)}`).join(", ")
      } rows/s, best ${run.overlap})`,
    );
    return run.rowsPerSecond;
  };
  let floorRate = await floor();
  const single = await timeDrain(services, {
    mode: "single",
    batchSize: 1,
    replicas: 1,
    users: plan.singleUsers,
  });
  progress.step(describe(single, floorRate));
  // Right after single mode, on the same backlog, so the two are read against each other.
  const course = await timeCourseDrain(services, plan.singleUsers);
  progress.step(
    `${describe(course, floorRate)}; single mode ${
      (single.rowsPerSecond / course.rowsPerSecond).toFixed(2)
    }× it`,
  );
  const batch: DrainRun[] = [];
  for (const replicas of plan.replicas) {
    for (const batchSize of plan.batchSizes) {
      const run = await timeDrain(services, {
        mode: "batch",
        batchSize,
        replicas,
        users: plan.users,
      });
      batch.push(run);
      progress.step(describe(run, floorRate));
    }
  }
  await floor();
  floorRate = floors.reduce((sum, r) => sum + r.rowsPerSecond, 0) / floors.length;

  let profile: ProfileSummary | undefined;
  if (plan.profileUsers > 0) {
    const dir = await Deno.makeTempDir({ dir: workDir, prefix: "consumer-profile-" });
    await timeDrain(services, {
      mode: "batch",
      batchSize: FLOOR_BATCH,
      replicas: 1,
      users: plan.profileUsers,
    }, { cpuProfileDir: dir });
    profile = await summariseProfileDir(dir, { repoUrl: `file://${REPO_DIR}/`, top: 12 });
    progress.step(
      `profiled a consumer (batch ${FLOOR_BATCH}) draining ${formatCount(plan.profileUsers)} users`,
    );
  }
  let singleProfile: ProfileSummary | undefined;
  if (plan.profileUsers > 0) {
    const dir = await Deno.makeTempDir({ dir: workDir, prefix: "single-profile-" });
    await timeDrain(services, {
      mode: "single",
      batchSize: 1,
      replicas: 1,
      users: plan.singleUsers,
    }, { cpuProfileDir: dir });
    singleProfile = await summariseProfileDir(dir, { repoUrl: `file://${REPO_DIR}/`, top: 12 });
    progress.step(
      `profiled a consumer in single mode draining ${formatCount(plan.singleUsers)} users`,
    );
  }
  await services.resetTable();
  return {
    plan,
    floors,
    floorRowsPerSecond: floorRate,
    single,
    course,
    batch,
    profile,
    singleProfile,
  };
}
