/**
 * The consumer process: parses its configuration, serves `/healthz`, `/readyz`
 * and `/metrics` on PORT (`health_server.ts`), opens its two Redis connections
 * (`redis_connections.ts`) and its PostgreSQL clients, brings the schema up to
 * date (`startup_migration.ts`) and runs the loop (`consumer.ts`) until a
 * SIGTERM/SIGINT, then stops as `docs/delivery.md#how-the-code-keeps-it`
 * promises (`lifecycle.ts`). `/readyz` answers 200 once migrated and
 * registered, while Redis and PostgreSQL answer within STATEMENT_TIMEOUT_MS,
 * until stopping. It logs JSON lines (`runtime/event_log.ts`) and labels its
 * metrics with its replica id (REPLICA_ID, else the hostname).
 *
 * Reads env: PORT, REPLICA_ID, CONSUMER_MODE, BATCH_SIZE, HEARTBEAT_TTL_MS,
 * RECOVERY_INTERVAL_MS, MAX_CRASHES, STATEMENT_TIMEOUT_MS, BLOCK_TIMEOUT_SECONDS,
 * RETRY_MAX_DELAY_MS, SHUTDOWN_TIMEOUT_MS, REDIS_URL, REDIS_CLUSTER_NODES, REDIS_USERNAME,
 * REDIS_PASSWORD, REDIS_TLS_CA_FILE, QUEUE_NAME, QUEUE_SHARDS, PGHOST, PGPORT, PGUSER, PGPASSWORD,
 * PGDATABASE, PGSSLMODE, PGSSLROOTCERT.
 *
 * @module
 */

import { v7 as uuidv7 } from "uuid";
import { rotatingWait } from "./blocking_wait.ts";
import { queueShards, readQueueStats, ShardedQueue } from "@users-pipeline/queue";
import { Readiness } from "@users-pipeline/runtime/readiness";
import { startService } from "@users-pipeline/runtime/service_start";
import { postgresClients } from "@users-pipeline/runtime/postgres_client";
import { loadConsumerConfig, loopOptions } from "./config.ts";
import { Consumer, type ConsumerOptions } from "./consumer.ts";
import { logConsumerEvent } from "./consumer_log.ts";
import { serveHealth } from "./health_server.ts";
import { exitIfStillAlive, runLifecycle, stopper } from "./lifecycle.ts";
import { ConsumerMetrics } from "./metrics.ts";
import { PostgresStore, storeClientOptions } from "./postgres_store.ts";
import { consumerRedis } from "./redis_connections.ts";
import { migrateSchemaOnStart } from "./startup_migration.ts";

/** What a test entry point adds to the loop: the fault suite's crash points (`tests/`). */
export type ConsumerHooks = Pick<ConsumerOptions, "onStep">;

/** Runs the consumer process until it is stopped, then sets its exit code. */
export async function main(hooks: ConsumerHooks = {}): Promise<void> {
  const env = Deno.env.toObject();
  const { config, replica, log } = startService("server-consumer", () => loadConsumerConfig(env));
  const redis = consumerRedis(config);
  const postgres = postgresClients(config);
  const cluster = config.REDIS_CLUSTER_NODES !== "";
  const keys = queueShards(config.QUEUE_NAME, { shards: config.QUEUE_SHARDS, cluster });
  // No WAIT on the consumer's moves: a failover that undoes one only delivers users again, and
  // waiting would stop a promoted master without replicas from draining
  // (`docs/scaling.md#failover-and-redis_wait_replicas`).
  const queue = new ShardedQueue(redis.commands, { keys });
  const timeoutMs = config.STATEMENT_TIMEOUT_MS;
  const store = new PostgresStore(() => postgres.connect(storeClientOptions(timeoutMs)), timeoutMs);
  // Not ready until migrated and registered; then while both answer, until stopping.
  const readiness = new Readiness(
    { redis: () => redis.commands.ping(), postgres: () => store.ping() },
    { timeoutMs, starting: "migrating the schema" },
  );
  // The queue's gauges are read at scrape time on the commands connection, which fails fast.
  const queueStats = () => readQueueStats(redis.commands, { keys: queue.keys });
  const metrics = new ConsumerMetrics({ replica, queueStats });
  const health = serveHealth(readiness, {
    port: config.PORT,
    metrics: () => metrics.response(),
    log,
  });
  const consumer = new Consumer({
    ...loopOptions(config),
    ...hooks,
    queue,
    waitForItems: rotatingWait(redis.blocking, keys.map((shard) => shard.queue)),
    store,
    newId: uuidv7,
    onEvent: (event) => {
      logConsumerEvent(log, event);
      metrics.onEvent(event);
      if (event.event === "consumer_started") readiness.started();
    },
    onMeasurement: (measurement) => metrics.onMeasurement(measurement),
  });

  const stopping = stopper({ log, readiness, consumer });
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => stopping.stop(signal));
  }
  Deno.exitCode = await runLifecycle({
    log,
    readiness,
    consumer,
    migrate: () =>
      migrateSchemaOnStart({
        connect: postgres.connect,
        log,
        readiness,
        retryMaxDelayMs: config.RETRY_MAX_DELAY_MS,
        signal: stopping.signal,
      }),
    connect: () => redis.ready(stopping.signal),
    close: async (timeoutMs) => {
      await Promise.allSettled([store.close(timeoutMs / 1_000), redis.close(timeoutMs)]);
      postgres.destroyAll();
      // Last, so /healthz says alive for as long as the process works.
      await health.shutdown();
    },
  });
  exitIfStillAlive(log);
}

if (import.meta.main) await main();
