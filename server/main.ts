/**
 * The API process: parses its configuration, connects to Redis (and to
 * PostgreSQL for `GET /users/:id` and the direct mode), serves the app, and on
 * SIGTERM/SIGINT stops accepting connections, lets in-flight requests finish,
 * then closes its clients and exits 0. It logs JSON lines
 * (`queue/event_log.ts`): `listening`, `redis_unavailable` and `redis_ready`,
 * `unexpected_error`, `stopping`, `stopped`, and `config_invalid` before
 * exiting 1 on a bad variable.
 *
 * Reads env: PORT, API_MODE, BODY_LIMIT_BYTES, REDIS_URL, REDIS_TIMEOUT_MS,
 * QUEUE_NAME, QUEUE_MAX_LENGTH, PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { encodeEnvelope } from "../queue/envelope.ts";
import { errorText, EventLog } from "../queue/event_log.ts";
import { queueKeys } from "../queue/keys.ts";
import { apiRedisOptions } from "../queue/redis_options.ts";
import { RedisQueue } from "../queue/redis_queue.ts";
import { postgresOptions } from "../schema/postgres_options.ts";
import { findUser, insertUsers } from "../schema/users_table.ts";
import { createApp } from "./app.ts";
import { loadServerConfig, type ServerConfig } from "./config.ts";

const log = new EventLog("server");

let config: ServerConfig;
try {
  config = loadServerConfig(Deno.env.toObject());
} catch (error) {
  log.error("config_invalid", { error, msg: errorText(error) });
  Deno.exit(1);
}

const redis = new Redis(config.REDIS_URL, apiRedisOptions(config.REDIS_TIMEOUT_MS));
// ioredis emits an error per failed reconnect; one record per outage is enough.
let redisDown = false;
redis.on("error", (error: Error) => {
  if (!redisDown) {
    log.warn("redis_unavailable", {
      error,
      msg: `redis unavailable, answering 503: ${errorText(error)}`,
    });
  }
  redisDown = true;
});
redis.on("ready", () => {
  log.info("redis_ready", { msg: redisDown ? "redis is back" : "redis is ready" });
  redisDown = false;
});

const sql = postgres({
  ...postgresOptions(config),
  max: config.API_MODE === "direct" ? 8 : 2,
  onnotice: () => {},
});
// A push Redis runs after half the timeout is void, so one that outlives the
// 503 we answered (Redis frozen, then resumed) cannot queue the user anyway.
const queue = new RedisQueue(redis, queueKeys(config.QUEUE_NAME), {
  enqueueWithinMs: Math.floor(config.REDIS_TIMEOUT_MS / 2),
});

const app = createApp({
  accept: config.API_MODE === "queue"
    ? async (user) => void await queue.enqueue(config.QUEUE_MAX_LENGTH, encodeEnvelope(user))
    : async (user) => void await insertUsers(sql, [user]),
  findUser: (id) => findUser(sql, id),
  bodyLimitBytes: config.BODY_LIMIT_BYTES,
  onUnexpectedError: (error) =>
    log.error("unexpected_error", {
      error,
      stack: error instanceof Error ? error.stack : undefined,
      msg: `unexpected error: ${errorText(error)}`,
    }),
});

const server = Deno.serve({
  port: config.PORT,
  hostname: "0.0.0.0",
  onListen: ({ port }) =>
    log.info("listening", {
      port,
      api_mode: config.API_MODE,
      msg: `listening on :${port} (API_MODE=${config.API_MODE})`,
    }),
}, app.fetch);

let stopping: Promise<void> | undefined;
function stop(signal: Deno.Signal): Promise<void> {
  stopping ??= (async () => {
    log.info("stopping", { signal, msg: `${signal}: finishing in-flight requests` });
    await server.shutdown();
    await Promise.allSettled([redis.quit(), sql.end({ timeout: 5 })]);
    // quit() fails while Redis is down or frozen, and ioredis then keeps
    // reconnecting, which would keep this process alive until SIGKILL.
    redis.disconnect();
    log.info("stopped", { msg: "stopped" });
  })();
  return stopping;
}
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void stop(signal));
}
await server.finished;
await stopping;
