/**
 * The API process: parses its configuration, connects to Redis (and to
 * PostgreSQL for `GET /users/:id` and `GET /users`), serves the app, and
 * on SIGTERM/SIGINT shuts down in two phases: first it drains (`/readyz`
 * answers 503 while everything else is served as before, for
 * SHUTDOWN_DRAIN_MS, so that Traefik's health check takes the replica out of
 * the rotation before its listener closes: otherwise clients get 502s), then
 * it closes its listener (a connection refused before anything was sent is
 * one Traefik retries on another replica), lets in-flight requests finish,
 * closes its clients, stays alive a moment with the port closed so a proxy
 * that still lists it is refused at once, and exits 0. It never answers a
 * request it received with a refusal of its own.
 *
 * `/readyz` is 200 while Redis answers a PING within REDIS_TIMEOUT_MS: what
 * accepting needs. It logs JSON lines (`queue/event_log.ts`): `listening`,
 * `redis_unavailable` and `redis_ready`, `unexpected_error`, `stopping` (the
 * drain begins), `stopped`, and `config_invalid` before exiting 1 on a bad
 * variable.
 *
 * `GET /metrics` serves its Prometheus metrics (`metrics.ts`); those and every
 * log record carry its replica id (REPLICA_ID, else the hostname).
 *
 * With ADMIN_TOKEN set it also serves the `/admin/…` routes (dead letters,
 * overview; `admin_routes.ts`) to requests bearing that token.
 *
 * With REDIS_CLUSTER_NODES it talks to a Redis Cluster instead of REDIS_URL;
 * with QUEUE_SHARDS > 1 it spreads the users over that many lists, each
 * user's shard given by its id (the shards take turns by millisecond), one
 * grouped push per shard per event-loop turn; with REDIS_WAIT_REPLICAS > 0 it
 * answers 202 only once that many replicas confirmed the push
 * (`queue/redis_queue.ts`), one group per shard in flight at a time.
 *
 * Reads env: PORT, BODY_LIMIT_BYTES, IDEMPOTENCY_TTL_SECONDS, REDIS_URL,
 * REDIS_CLUSTER_NODES, REDIS_TIMEOUT_MS, REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT_MS,
 * SHUTDOWN_DRAIN_MS, REPLICA_ID, ADMIN_TOKEN, QUEUE_NAME, QUEUE_SHARDS, QUEUE_MAX_LENGTH, PGHOST,
 * PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { withDeadline } from "../queue/deadline.ts";
import { DeadLetters } from "../queue/dead_letters.ts";
import { errorText, EventLog } from "../queue/event_log.ts";
import { queueShards } from "../queue/keys.ts";
import { ShardedPushes } from "../queue/grouped_pushes.ts";
import { Readiness } from "../queue/readiness.ts";
import { closeRedis, createRedisClient } from "../queue/redis_client.ts";
import { apiRedisOptions } from "../queue/redis_options.ts";
import { readOverview } from "../queue/overview.ts";
import { ShardedQueue } from "../queue/sharded_queue.ts";
import { postgresClients } from "../schema/postgres_client.ts";
import { findUser, listUsers } from "../schema/users_table.ts";
import { createApp } from "./app.ts";
import { loadServerConfig, type ServerConfig } from "./config.ts";
import { ApiMetrics } from "./metrics.ts";
import { userStatusReader } from "./user_status.ts";

let config: ServerConfig;
try {
  config = loadServerConfig(Deno.env.toObject());
} catch (error) {
  // REPLICA_ID may be the bad variable: the hostname says which replica failed.
  new EventLog("server", { replica: Deno.hostname() })
    .error("config_invalid", { error, msg: errorText(error) });
  Deno.exit(1);
}
// In compose each container's hostname is its id; replicas sharing a host need REPLICA_ID.
const replica = config.REPLICA_ID || Deno.hostname();
const log = new EventLog("server", { replica });

const cluster = config.REDIS_CLUSTER_NODES !== "";
const redis = createRedisClient(config, apiRedisOptions(config.REDIS_TIMEOUT_MS), {
  errors: { log, whileUnavailable: "answering 503" },
});
const postgres = postgresClients(config);
const sql = postgres.connect({ max: 2 });
// A push Redis runs after half the timeout is void, so one that outlives the
// 503 we answered (Redis frozen, then resumed) cannot queue the user anyway.
const queue = new ShardedQueue(
  redis,
  queueShards(config.QUEUE_NAME, { shards: config.QUEUE_SHARDS, cluster }),
  {
    enqueueWithinMs: Math.floor(config.REDIS_TIMEOUT_MS / 2),
    waitReplicas: config.REDIS_WAIT_REPLICAS,
    waitTimeoutMs: config.REDIS_WAIT_TIMEOUT_MS,
  },
);
// The users accepted while a shard's previous call was in flight (or in the same
// event-loop turn) go to Redis in one script call (see `queue/grouped_pushes.ts`).
const pushes = new ShardedPushes(
  queue.shards,
  config.QUEUE_MAX_LENGTH,
  (id) => queue.shardIndexOf(id),
);

// What accepting a user needs, probed on each GET /readyz.
const readiness = new Readiness(
  { redis: () => redis.ping() },
  { timeoutMs: config.REDIS_TIMEOUT_MS },
);

const app = createApp({
  accept: (user) => pushes.enqueue(user),
  // A keyed request is pushed alone (its record is checked and written in the push's step), in
  // the key's shard.
  acceptOnce: {
    newId: (key) => queue.idForKey(key),
    accept: (user, key) =>
      queue.enqueueOnce(user, {
        key,
        maxLength: config.QUEUE_MAX_LENGTH,
        ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
      }),
  },
  acceptTimeoutMs: config.REDIS_TIMEOUT_MS,
  readiness,
  userStatus: userStatusReader({
    indexed: (id) => queue.indexed(id),
    findUser: (id) => findUser(sql, id),
  }),
  listUsers: (limit) => listUsers(sql, limit),
  admin: config.ADMIN_TOKEN === "" ? undefined : {
    token: config.ADMIN_TOKEN,
    deadLetters: new DeadLetters(redis, queue.keys),
    overview: () => readOverview(redis, queue.keys),
  },
  bodyLimitBytes: config.BODY_LIMIT_BYTES,
  metrics: new ApiMetrics({ replica }),
  onUnexpectedError: (error) =>
    log.error("unexpected_error", {
      error,
      stack: error instanceof Error ? error.stack : undefined,
      msg: `unexpected error: ${errorText(error)}`,
    }),
});

/** The longest wait for in-flight requests once the listener is closed: a POST is bounded by its deadline. */
const IN_FLIGHT_GRACE_MS = 10_000;
/**
 * How long the process stays alive after closing its listener. A proxy whose configuration still
 * lists this replica may still pick it (Traefik's Swarm provider polls every second and applies
 * changes at most every 2 s; the drain covers most of that). While the process lives, its address
 * refuses such a connection at once, before anything is sent, and Traefik's retry takes the
 * request to another replica; once it exits, the address stops answering and the connection waits
 * for Traefik's 1 s dial timeout first. Longer would hold every request back as long while all
 * replicas restart at once.
 */
const CLOSED_LINGER_MS = 1_000;
/** Set once a signal arrives: the drain has begun. */
let stopping: Promise<void> | undefined;

/**
 * Every request is served in full until the listener closes: a stopping replica never refuses a
 * request it received, since it can still queue it. Once stopping, every answer closes its
 * connection. Otherwise Traefik keeps idle keep-alive connections to this replica, and when the
 * listener finally closes them, a request Traefik is writing on one at that moment fails after its
 * headers went out: Traefik cannot know whether it was received, does not retry it, and its client
 * gets a 502. With no idle connection left, a late request finds the port closed before sending
 * anything, which Traefik's retry sends on.
 */
async function serve(request: Request, info: Deno.ServeHandlerInfo): Promise<Response> {
  const response = await app.fetch(request, info);
  return stopping === undefined ? response : closingConnection(response);
}

function closingConnection(response: Response): Response {
  try {
    response.headers.set("Connection", "close");
    return response;
  } catch {
    // Immutable headers (a response passed through from fetch): copy them.
    const copy = new Response(response.body, response);
    copy.headers.set("Connection", "close");
    return copy;
  }
}

// Listen once Redis is ready: until then every push would be refused at once, and a balancer that
// trusts a replica as soon as it accepts connections (Traefik after a restart, before its next
// check) would pass those refusals on, where a refused connection it retries on another replica.
// With Redis unreachable it listens anyway after REDIS_TIMEOUT_MS, so /readyz can say why.
if (redis.status !== "ready") {
  await withDeadline(
    new Promise<void>((resolve) => redis.once("ready", () => resolve())),
    config.REDIS_TIMEOUT_MS,
    "connect to Redis before listening",
  ).catch(() => {});
}
const server = Deno.serve({
  port: config.PORT,
  hostname: "0.0.0.0",
  onListen: ({ port }) => log.info("listening", { port, msg: `listening on :${port}` }),
}, serve);

function stop(signal: Deno.Signal): Promise<void> {
  stopping ??= (async () => {
    readiness.drain();
    log.info("stopping", {
      signal,
      drain_ms: config.SHUTDOWN_DRAIN_MS,
      msg: `${signal}: not ready; serving ${config.SHUTDOWN_DRAIN_MS} ms more so the load ` +
        `balancer stops routing here, then finishing in-flight requests`,
    });
    await new Promise((resolve) => setTimeout(resolve, config.SHUTDOWN_DRAIN_MS));
    // No new connection from here on; the requests already received are answered in full.
    await withDeadline(server.shutdown(), IN_FLIGHT_GRACE_MS, "finish the requests in flight")
      .catch(() => {});
    await Promise.allSettled([closeRedis(redis, config.REDIS_TIMEOUT_MS), sql.end({ timeout: 5 })]);
    postgres.destroyAll();
    await new Promise((resolve) => setTimeout(resolve, CLOSED_LINGER_MS));
    log.info("stopped", { msg: "stopped" });
  })();
  return stopping;
}
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void stop(signal));
}
await server.finished;
await stopping;
