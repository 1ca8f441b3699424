/**
 * The consumer process: parses its configuration, opens two Redis connections
 * (one for short commands, one of its own for the blocking wait) and a
 * PostgreSQL pool, runs the consumer loop, and on SIGTERM/SIGINT finishes or
 * hands back the batch in hand and exits 0.
 *
 * Reads env: CONSUMER_MODE, BATCH_SIZE, HEARTBEAT_TTL_MS, RECOVERY_INTERVAL_MS,
 * MAX_CRASHES, STATEMENT_TIMEOUT_MS, BLOCK_TIMEOUT_SECONDS, RETRY_MAX_DELAY_MS,
 * SHUTDOWN_TIMEOUT_MS, FAULT_CRASH_AT, FAULT_CRASH_ON_NAME, REDIS_URL, QUEUE_NAME, QUEUE_MAX_LENGTH, PGHOST, PGPORT,
 * PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { Redis, type RedisOptions } from "ioredis";
import postgres from "postgres";
import { v7 as uuidv7 } from "uuid";
import { queueKeys } from "../queue/keys.ts";
import { type Batch, RedisQueue, waitForItems } from "../queue/redis_queue.ts";
import { postgresOptions } from "../schema/postgres_options.ts";
import { batchSizeOf, type ConsumerConfig, loadConsumerConfig } from "./config.ts";
import { Consumer, type Step } from "./consumer.ts";
import { PostgresStore } from "./postgres_store.ts";

let config: ConsumerConfig;
try {
  config = loadConsumerConfig(Deno.env.toObject());
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  Deno.exit(1);
}

// Commands fail at once while Redis is unreachable; the loop owns retrying,
// with backoff, so nothing queues up unboundedly inside the client.
const redisOptions: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  connectTimeout: 2_000,
  retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
};
const commands = new Redis(config.REDIS_URL, { ...redisOptions, commandTimeout: 10_000 });
const blocking = new Redis(config.REDIS_URL, redisOptions);
// Errors surface through the loop's outage log; without listeners ioredis prints each retry.
commands.on("error", () => {});
blocking.on("error", () => {});

// When a connection opens, postgres.js runs a query of its own (it loads the
// array types) that nothing awaits. If PostgresStore throws that client away
// at the statement deadline meanwhile (PostgreSQL just thawed from a freeze,
// say), the query rejects with CONNECTION_DESTROYED and, unhandled, would kill
// the process: every consumer at once. Only destroyed clients raise that code,
// and their own statements are already settled, so those rejections are ignored.
globalThis.addEventListener("unhandledrejection", (event) => {
  if ((event.reason as { code?: unknown } | null)?.code === "CONNECTION_DESTROYED") {
    event.preventDefault();
  }
});

const keys = queueKeys(config.QUEUE_NAME);
const store = new PostgresStore(
  () =>
    postgres({
      ...postgresOptions(config),
      max: 2,
      onnotice: () => {},
      // A server-side bound as well, for statements that run but never finish.
      connection: { statement_timeout: config.STATEMENT_TIMEOUT_MS },
    }),
  config.STATEMENT_TIMEOUT_MS,
);

/**
 * The blocking wait with a client-side bound a second past the server-side
 * one: if a reconnect leaves the reply lost, drop the connection and carry on.
 */
async function waitBounded(timeoutSeconds: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      blocking.disconnect(true);
      reject(new Error("blocking read got no reply; reconnecting"));
    }, timeoutSeconds * 1_000 + 1_000);
  });
  try {
    return await Promise.race([waitForItems(blocking, keys, timeoutSeconds), guard]);
  } finally {
    clearTimeout(timer);
  }
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
  queue: new RedisQueue(commands, keys),
  waitForItems: waitBounded,
  store,
  batchSize: batchSizeOf(config),
  heartbeatTtlMs: config.HEARTBEAT_TTL_MS,
  recoveryIntervalMs: config.RECOVERY_INTERVAL_MS,
  maxCrashes: config.MAX_CRASHES,
  blockTimeoutSeconds: config.BLOCK_TIMEOUT_SECONDS,
  retryMaxDelayMs: config.RETRY_MAX_DELAY_MS,
  shutdownTimeoutMs: config.SHUTDOWN_TIMEOUT_MS,
  newId: uuidv7,
  onStep: faultInjection(config),
});

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => {
    console.log(`${signal}: finishing the batch in hand`);
    void consumer.stop();
  });
}

// Without an offline queue, commands sent before the first connection would
// fail; start the loop once both connections are up (or stop if asked to first).
let stopRequested = false;
await Promise.race([
  Promise.all(
    [commands, blocking].map((client) =>
      client.status === "ready"
        ? undefined
        : new Promise((resolve) => client.once("ready", resolve))
    ),
  ),
  new Promise<void>((resolve) => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      Deno.addSignalListener(signal, () => {
        stopRequested = true;
        resolve();
      });
    }
  }),
]);

try {
  if (!stopRequested) await consumer.run();
} finally {
  // The blocking connection holds nothing to flush; quit() on it would wait
  // for a frozen Redis forever. A failed quit() leaves ioredis reconnecting,
  // which would keep the process alive: disconnect both for good.
  blocking.disconnect();
  await Promise.allSettled([store.close(), commands.quit()]);
  commands.disconnect();
  console.log(`exiting: ${JSON.stringify(consumer.stats)}`);
}
// Everything is handed back or acknowledged and the clients are closed, but
// postgres.js can revive a connection that was mid-reconnect when a client was
// replaced after a timeout (seen after a PostgreSQL restart); that idle socket
// would keep the process alive until SIGKILL. Nothing is left to do: exit.
Deno.exit(0);
