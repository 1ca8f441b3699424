/**
 * The API process: parses its configuration (`config.ts`), connects to Redis
 * and to PostgreSQL (for `GET /users/:id` and `GET /users`), serves the app
 * (`app.ts`) and, on SIGTERM/SIGINT, drains for SHUTDOWN_DRAIN_MS, closes its
 * listener, finishes the requests in flight, closes its clients and exits 0
 * (`graceful_server.ts`). `/readyz` is 200 while Redis answers a PING within
 * REDIS_TIMEOUT_MS: what accepting needs.
 *
 * It logs JSON lines (`runtime/event_log.ts`): `listening`, `redis_unavailable`
 * and `redis_ready`, `unexpected_error`, `stopping` (the drain begins),
 * `stopped`, and `config_invalid` before exiting 1 on a bad variable. Those
 * and its metrics (`GET /metrics`) carry its replica id (REPLICA_ID, else the
 * hostname). With ADMIN_TOKEN set it also serves `/admin/…` (`admin_routes.ts`) and the listing
 * `GET /users`. With CLIENT_KEYS_FILE it reads the clients' keys from that file, once, and the
 * client routes need one (`client_keys.ts`); it logs each request refused for its key as
 * `credentials_refused` (at most one record a second per address and code, whatever a flood
 * sends). With RATE_LIMIT_USERS_PER_SECOND it holds each client to that rate (`rate_limit.ts`).
 *
 * With REDIS_CLUSTER_NODES it talks to a Redis Cluster instead of REDIS_URL;
 * with QUEUE_SHARDS > 1 it spreads the users over that many lists by id; with
 * REDIS_WAIT_REPLICAS > 0 it answers 202 only once that many replicas
 * confirmed the push (`queue_accept.ts`, `queue/shard_pushes.ts`).
 *
 * Reads env: PORT, BODY_LIMIT_BYTES, BATCH_MAX_ITEMS, BATCH_BODY_LIMIT_BYTES, IDEMPOTENCY_TTL_SECONDS, REDIS_URL,
 * REDIS_CLUSTER_NODES, REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA_FILE, REDIS_TIMEOUT_MS,
 * REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT_MS,
 * SHUTDOWN_DRAIN_MS, REPLICA_ID, ADMIN_TOKEN, CLIENT_KEYS_FILE, RATE_LIMIT_USERS_PER_SECOND,
 * RATE_LIMIT_BURST, QUEUE_NAME, QUEUE_SHARDS, QUEUE_MAX_LENGTH, PGHOST, PGPORT, PGUSER, PGPASSWORD,
 * PGDATABASE, PGSSLMODE, PGSSLROOTCERT; and reads the files CLIENT_KEYS_FILE, REDIS_TLS_CA_FILE and
 * PGSSLROOTCERT name.
 *
 * @module
 */

import {
  DeadLetters,
  queueShards,
  readOverview,
  SCRIPTS_WITH_KEY_COUNT,
  ShardedQueue,
} from "@users-pipeline/queue";
import { errorText } from "@users-pipeline/runtime/event_log";
import { Readiness } from "@users-pipeline/runtime/readiness";
import { closeRedis, createRedisClient, redisReady } from "@users-pipeline/runtime/redis_client";
import { apiRedisOptions } from "@users-pipeline/runtime/redis_options";
import { startService } from "@users-pipeline/runtime/service_start";
import { postgresClients } from "@users-pipeline/runtime/postgres_client";
import { findUser, listUsers } from "@users-pipeline/schema";
import { createApp, type CredentialRefusal } from "./app.ts";
import { ANONYMOUS, type ClientKey, parseClientKeys } from "./client_keys.ts";
import { RateLimiter } from "./rate_limit.ts";
import { loadServerConfig } from "./config.ts";
import { serveGracefully } from "./graceful_server.ts";
import { ApiMetrics } from "./metrics.ts";
import { queueAccept } from "./queue_accept.ts";
import { userStatusReader } from "./user_status.ts";

const { config, replica, log } = startService("server", () => {
  const config = loadServerConfig(Deno.env.toObject());
  return { ...config, clientKeys: readClientKeys(config.CLIENT_KEYS_FILE) };
});

/** The clients of the file at `path` (none for an empty path), or a `TypeError` saying why not. */
function readClientKeys(path: string): ClientKey[] {
  if (path === "") return [];
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    throw new TypeError(
      `Cannot start server: CLIENT_KEYS_FILE cannot be read: current value is "${path}"`,
      { cause: error },
    );
  }
  const keys = parseClientKeys(text);
  if (keys.length === 0) {
    throw new TypeError(
      `Cannot start server: CLIENT_KEYS_FILE names no client: current value is "${path}"`,
    );
  }
  return keys;
}

const cluster = config.REDIS_CLUSTER_NODES !== "";
const redis = createRedisClient(config, {
  role: apiRedisOptions(config.REDIS_TIMEOUT_MS),
  unpipelined: SCRIPTS_WITH_KEY_COUNT,
  errors: { log, whileUnavailable: "answering 503" },
});
const postgres = postgresClients(config);
const sql = postgres.connect({ max: 2 });
// A push Redis runs after half the timeout is void, so one that outlives the
// 503 we answered (Redis frozen, then resumed) cannot queue the user anyway.
const queue = new ShardedQueue(redis, {
  keys: queueShards(config.QUEUE_NAME, { shards: config.QUEUE_SHARDS, cluster }),
  enqueueWithinMs: Math.floor(config.REDIS_TIMEOUT_MS / 2),
  waitReplicas: config.REDIS_WAIT_REPLICAS,
  waitTimeoutMs: config.REDIS_WAIT_TIMEOUT_MS,
});
// What accepting a user needs, probed on each GET /readyz.
const readiness = new Readiness(
  { redis: () => redis.ping() },
  { timeoutMs: config.REDIS_TIMEOUT_MS },
);

const app = createApp({
  ...queueAccept(queue, config),
  readiness,
  userStatus: userStatusReader({
    indexed: (id) => queue.indexed(id),
    findUser: (id) => findUser(sql, id),
  }),
  listUsers: (limit) => listUsers(sql, limit),
  clientKeys: config.clientKeys,
  onCredentialRefused: refusalLog(),
  rateLimit: config.RATE_LIMIT_USERS_PER_SECOND === 0 ? undefined : new RateLimiter(redis, {
    usersPerSecond: config.RATE_LIMIT_USERS_PER_SECOND,
    burst: config.RATE_LIMIT_BURST,
    prefix: config.QUEUE_NAME,
  }),
  admin: config.ADMIN_TOKEN === "" ? undefined : {
    token: config.ADMIN_TOKEN,
    deadLetters: new DeadLetters(redis, queue.keys),
    overview: () => readOverview(redis, { keys: queue.keys }),
  },
  bodyLimitBytes: config.BODY_LIMIT_BYTES,
  metrics: new ApiMetrics({
    replica,
    clients: config.clientKeys.length === 0 ? [ANONYMOUS] : config.clientKeys.map((c) => c.name),
  }),
  onUnexpectedError: (error) =>
    log.error("unexpected_error", {
      error,
      stack: error instanceof Error ? error.stack : undefined,
      msg: `unexpected error: ${errorText(error)}`,
    }),
});

/**
 * Logs a request refused for its credentials, at most once a second per address and code: one
 * client sending wrong keys in a loop must not flood the log, nor grow the memory (the record of
 * who was logged is forgotten past 10,000 entries).
 */
function refusalLog(): (refusal: CredentialRefusal) => void {
  const logged = new Map<string, number>();
  return ({ code, address }) => {
    const now = Date.now();
    const key = `${address} ${code}`;
    if (now - (logged.get(key) ?? -Infinity) < 1_000) return;
    if (logged.size >= 10_000) logged.clear();
    logged.set(key, now);
    log.warn("credentials_refused", { code, address, msg: `refused ${address}: ${code}` });
  };
}

const server = await serveGracefully(app.fetch, {
  port: config.PORT,
  readiness,
  drainMs: config.SHUTDOWN_DRAIN_MS,
  log,
  // Listen once Redis is ready: until then every push would be refused at once, and a balancer
  // that trusts a replica as soon as it accepts connections (Traefik after a restart, before its
  // next check) would pass those refusals on, where a refused connection it retries on another
  // replica. With Redis unreachable it listens anyway after REDIS_TIMEOUT_MS, so /readyz says why.
  listenWhen: redisReady(redis, { timeoutMs: config.REDIS_TIMEOUT_MS }),
  close: async () => {
    await Promise.allSettled([closeRedis(redis, config.REDIS_TIMEOUT_MS), sql.end({ timeout: 5 })]);
    postgres.destroyAll();
  },
});
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void server.stop(signal));
}
await server.finished;
