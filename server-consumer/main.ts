/**
 * The consumer process: parses its configuration, serves `/healthz` and
 * `/readyz` on PORT (`health_server.ts`), brings the schema up to date
 * (`startup_migration.ts`, waiting for PostgreSQL if need be), opens two Redis
 * connections (one for short commands, one of its own for the blocking wait)
 * and a PostgreSQL pool, and runs the consumer loop. On SIGTERM/SIGINT it is
 * not ready at once, finishes or hands back the batch in hand, closes its
 * clients and exits 0: within SHUTDOWN_TIMEOUT_MS and a few seconds (the
 * hand-back's and the closes' own bounds), inside compose's 30 s grace
 * period, even while Redis or PostgreSQL is down or frozen.
 *
 * `GET /metrics` on the same port serves its Prometheus metrics and the
 * queue's (`metrics.ts`); those and every log record carry its replica id
 * (REPLICA_ID, else the hostname).
 *
 * `/readyz` answers 200 once the schema is migrated and the consumer has
 * registered (`consumer_started`), while Redis answers PING and PostgreSQL
 * `select 1` within STATEMENT_TIMEOUT_MS, and until it starts stopping.
 *
 * It logs JSON lines (`queue/event_log.ts`): `listening`, `migrating` per
 * migration applied, the loop's events (`consumer_started`,
 * `consumer_fenced`, `outage_started`, `outage_ended`, `recovered`,
 * `dead_lettered`, `shutdown_deadline`, `handed_back`, `hand_back_failed`),
 * then `stopping` on a signal and `stopped` with the totals as its last line;
 * `config_invalid`, `listen_failed` or `migration_failed` before exiting 1;
 * `unexpected_error` if the loop fails; `leaked_handle` (exit 1) if anything
 * still keeps the process alive after everything was closed.
 *
 * With REDIS_CLUSTER_NODES both Redis clients are Cluster clients; with
 * QUEUE_SHARDS > 1 it serves every shard in turn (`queue/sharded_queue.ts`),
 * its idle wait watching one shard at a time (`queue/blocking_wait.ts`).
 * It never waits for replicas (REDIS_WAIT_REPLICAS is the API's): see below.
 *
 * Reads env: PORT, REPLICA_ID, CONSUMER_MODE, BATCH_SIZE, HEARTBEAT_TTL_MS,
 * RECOVERY_INTERVAL_MS, MAX_CRASHES, STATEMENT_TIMEOUT_MS,
 * BLOCK_TIMEOUT_SECONDS, RETRY_MAX_DELAY_MS, SHUTDOWN_TIMEOUT_MS,
 * FAULT_CRASH_AT, FAULT_CRASH_ON_NAME, REDIS_URL, REDIS_CLUSTER_NODES,
 * QUEUE_NAME, QUEUE_SHARDS,
 * QUEUE_MAX_LENGTH, PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { v7 as uuidv7 } from "uuid";
import { rotatingWait } from "../queue/blocking_wait.ts";
import { errorText, EventLog } from "../queue/event_log.ts";
import { queueShards } from "../queue/keys.ts";
import { Readiness } from "../queue/readiness.ts";
import { closeRedis, createRedisClient } from "../queue/redis_client.ts";
import { consumerBlockingOptions, consumerCommandOptions } from "../queue/redis_options.ts";
import type { Batch } from "../queue/redis_queue.ts";
import { ShardedQueue } from "../queue/sharded_queue.ts";
import { readQueueStats } from "../queue/queue_stats.ts";
import { migrate } from "../schema/migrate.ts";
import { postgresClients } from "../schema/postgres_client.ts";
import { batchSizeOf, type ConsumerConfig, loadConsumerConfig } from "./config.ts";
import { Consumer, type Step } from "./consumer.ts";
import { logConsumerEvent } from "./consumer_log.ts";
import { serveHealth } from "./health_server.ts";
import { ConsumerMetrics } from "./metrics.ts";
import { PostgresStore } from "./postgres_store.ts";
import { migrateOnStart } from "./startup_migration.ts";

/**
 * How long the process may take to exit once everything is closed. The runtime
 * itself can take about 2 s after a PostgreSQL connection was used, more on a
 * busy machine; 5 s leaves room for that and still exits, in the worst case
 * measured (25 s after SIGTERM during an outage), inside compose's 30 s.
 */
const LEAK_GRACE_MS = 5_000;

/**
 * How long closing the clients may take once the loop has ended (nothing is
 * in flight then): a live server answers in milliseconds; a frozen one is
 * abandoned after this, so a stop ends within SHUTDOWN_TIMEOUT_MS +
 * HAND_BACK_TIMEOUT_MS + 1 s, well inside compose's 30 s.
 */
const CLOSE_TIMEOUT_MS = 1_000;

let config: ConsumerConfig;
try {
  config = loadConsumerConfig(Deno.env.toObject());
} catch (error) {
  // REPLICA_ID may be the bad variable: the hostname says which replica failed.
  new EventLog("server-consumer", { replica: Deno.hostname() })
    .error("config_invalid", { error, msg: errorText(error) });
  Deno.exit(1);
}
// In compose each container's hostname is its id; replicas sharing a host need REPLICA_ID.
const replica = config.REPLICA_ID || Deno.hostname();
const log = new EventLog("server-consumer", { replica });

const cluster = config.REDIS_CLUSTER_NODES !== "";
// Errors surface through the loop's outage events.
const commands = createRedisClient(config, consumerCommandOptions, { errors: "ignore" });
// In a cluster, a client of its own too: it blocks its connection to the node it waits on.
const blocking = createRedisClient(config, consumerBlockingOptions, { errors: "ignore" });

// Every PostgreSQL client of the process, its sockets destroyed at exit.
const postgres = postgresClients(config);
const keys = queueShards(config.QUEUE_NAME, { shards: config.QUEUE_SHARDS, cluster });
// No WAIT on the consumer's moves. A failover can undo a fetch or an acknowledgement the new
// master never received, and either undo only delivers those users again: the insert is
// idempotent by id, and the acknowledgement trims only a batch whose oldest item is still at the
// end of the processing list. Nothing accepted depends on them, so confirming them would only stop
// a shard whose promoted master has no replica left from draining the 202s it holds.
const queue = new ShardedQueue(commands, keys);
const store = new PostgresStore(
  () =>
    postgres.connect({
      // Two: the insert of the batch taken early runs beside the one in
      // progress (see consumer.ts), not queued behind it on one connection.
      max: 2,
      // A server-side bound as well, for statements that run but never finish.
      connection: { statement_timeout: config.STATEMENT_TIMEOUT_MS },
      // No reconnect delay of postgres.js' own: the loop already retries with
      // backoff. After a long outage postgres.js would wait up to 20 s before
      // reconnecting, which only delays recovery, and a reconnect timer still
      // pending at shutdown reopens a socket after end(), so the process never
      // exits (seen as leaked_handle after the fault suite's PostgreSQL restart).
      backoff: () => 0,
    }),
  config.STATEMENT_TIMEOUT_MS,
);

// Not ready until migrated and registered; then while both answer, until stopping.
const readiness = new Readiness(
  { redis: () => commands.ping(), postgres: () => store.ping() },
  { timeoutMs: config.STATEMENT_TIMEOUT_MS, starting: "migrating the schema" },
);
// The queue's gauges are read at scrape time on the commands connection, which fails fast.
const metrics = new ConsumerMetrics({ replica, queueStats: () => readQueueStats(commands, queue) });
let health: Deno.HttpServer;
try {
  health = serveHealth(readiness, {
    port: config.PORT,
    metrics: () => metrics.response(),
    onListen: (port) =>
      log.info("listening", { port, msg: `/healthz, /readyz and /metrics on :${port}` }),
  });
} catch (error) {
  log.error("listen_failed", {
    port: config.PORT,
    error,
    msg: `Cannot serve /healthz and /readyz on port ${config.PORT}: ${errorText(error)}`,
  });
  Deno.exit(1);
}

/** The test suite's crash points (see FAULT_CRASH_AT); none in normal operation. */
function faultInjection(
  { FAULT_CRASH_AT: at, FAULT_CRASH_ON_NAME: name }: ConsumerConfig,
): ((step: Step, batch: Batch) => void) | undefined {
  if (at === "none" && name === "") return undefined;
  return (step, batch) => {
    const hit = name === ""
      ? step === at
      : step === "fetched" && batch.items.some((item) => item.includes(JSON.stringify(name)));
    if (hit) Deno.kill(Deno.pid, "SIGKILL");
  };
}

const consumer = new Consumer({
  queue,
  waitForItems: rotatingWait(blocking, keys.map((shard) => shard.queue)),
  store,
  batchSize: batchSizeOf(config),
  heartbeatTtlMs: config.HEARTBEAT_TTL_MS,
  recoveryIntervalMs: config.RECOVERY_INTERVAL_MS,
  maxCrashes: config.MAX_CRASHES,
  blockTimeoutSeconds: config.BLOCK_TIMEOUT_SECONDS,
  retryMaxDelayMs: config.RETRY_MAX_DELAY_MS,
  shutdownTimeoutMs: config.SHUTDOWN_TIMEOUT_MS,
  newId: uuidv7,
  onEvent: (event) => {
    logConsumerEvent(log, event);
    metrics.onEvent(event);
    if (event.event === "consumer_started") readiness.started();
  },
  onMeasurement: (measurement) => metrics.onMeasurement(measurement),
  onStep: faultInjection(config),
});

const stopRequested = new AbortController();
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => {
    if (stopRequested.signal.aborted) return;
    readiness.drain();
    log.info("stopping", { signal, msg: `${signal}: not ready; finishing the batch in hand` });
    stopRequested.abort();
    void consumer.stop();
  });
}

/** Resolves true once `work` has, false when a stop came first. */
function unlessStopped(work: Promise<unknown>): Promise<boolean> {
  const stopped = new Promise<false>((resolve) => {
    if (stopRequested.signal.aborted) resolve(false);
    stopRequested.signal.addEventListener("abort", () => resolve(false), { once: true });
  });
  return Promise.race([work.then(() => true), stopped]);
}

let failure: unknown;
let migrationFailure: unknown;
try {
  // One connection, so that the migration's advisory lock and its statements
  // share a session; ended at once (in flight or not) on a stop.
  const migrationSql = postgres.connect({
    max: 1,
    // migrateOnStart retries with backoff; postgres.js' own would only delay it.
    backoff: () => 0,
  });
  let migrated = false;
  try {
    migrated = await migrateOnStart({
      migrate: () =>
        migrate(migrationSql, {
          onMigration: ({ id, name }) =>
            log.info("migrating", { id, name, msg: `migrating ${id} ${name}` }),
        }),
      retryMaxDelayMs: config.RETRY_MAX_DELAY_MS,
      onEvent: (event) => logConsumerEvent(log, event),
      onForeignTable: (error) => {
        log.error("schema_conflict", {
          error,
          msg: `${error.message} This consumer stays up, not ready, and checks again every ` +
            `${config.RETRY_MAX_DELAY_MS} ms.`,
        });
        readiness.starting('schema: a table "users" this pipeline did not create is in the way');
      },
      recheckMs: config.RETRY_MAX_DELAY_MS,
      signal: stopRequested.signal,
    });
  } catch (error) {
    migrationFailure = error;
  } finally {
    await migrationSql.end({ timeout: migrated ? 5 : 0 });
  }
  readiness.starting("connecting to Redis");
  // Without an offline queue, commands sent before the first connection would
  // fail; start the loop once both connections are up (or stop if asked to first).
  const connected = migrated && await unlessStopped(Promise.all(
    [commands, blocking].map((client) =>
      client.status === "ready"
        ? undefined
        : new Promise((resolve) => client.once("ready", resolve))
    ),
  ));
  readiness.starting("registering");
  if (connected) await consumer.run();
} catch (error) {
  failure = error;
} finally {
  // The blocking connection holds nothing to flush; quit() on it would wait
  // for a frozen Redis forever: disconnected at once, for good.
  blocking.disconnect();
  await Promise.allSettled([
    store.close(CLOSE_TIMEOUT_MS / 1_000),
    closeRedis(commands, CLOSE_TIMEOUT_MS),
  ]);
  postgres.destroyAll();
  // Last, so /healthz says alive for as long as the process works.
  await health.shutdown();
}

if (migrationFailure !== undefined) {
  log.error("migration_failed", {
    error: migrationFailure,
    msg: `Cannot start as the schema could not be migrated: ${errorText(migrationFailure)}`,
  });
  Deno.exitCode = 1;
}
if (failure !== undefined) {
  log.error("unexpected_error", {
    error: failure,
    stack: failure instanceof Error ? failure.stack : undefined,
    msg: `consumer loop failed: ${errorText(failure)}`,
  });
  Deno.exitCode = 1;
}
const { stored, deadLettered, batches, recovered } = consumer.stats;
log.info("stopped", {
  consumer_id: consumer.id,
  stored,
  dead_lettered: deadLettered,
  batches,
  recovered,
  msg: `consumer ${consumer.id} stopped: ${stored} stored, ${deadLettered} dead-lettered ` +
    `in ${batches} batches, ${recovered} recovered`,
});

// Everything is closed, so the process now exits by itself unless a handle is
// still open (a socket postgres.js revived, say). The timer does not keep the
// process alive; it only fires if something else does, and then says so.
const leakGuard = setTimeout(() => {
  log.error("leaked_handle", {
    ms: LEAK_GRACE_MS,
    msg: `still running ${LEAK_GRACE_MS} ms after closing every client: exiting 1`,
  });
  Deno.exit(1);
}, LEAK_GRACE_MS);
Deno.unrefTimer(leakGuard);
