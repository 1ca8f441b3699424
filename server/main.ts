/**
 * The API process: parses its configuration, connects to Redis (and to
 * PostgreSQL for `GET /users/:id` and the direct mode), serves the app, and on
 * SIGTERM/SIGINT stops accepting connections, lets in-flight requests finish,
 * then closes its clients and exits 0.
 *
 * Reads env: PORT, API_MODE, BODY_LIMIT_BYTES, REDIS_URL, REDIS_TIMEOUT_MS,
 * QUEUE_NAME, QUEUE_MAX_LENGTH, PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { encodeEnvelope } from "../queue/envelope.ts";
import { queueKeys } from "../queue/keys.ts";
import { RedisQueue } from "../queue/redis_queue.ts";
import { postgresOptions } from "../schema/postgres_options.ts";
import { findUser, insertUsers } from "../schema/users_table.ts";
import { createApp } from "./app.ts";
import { loadServerConfig, type ServerConfig } from "./config.ts";

let config: ServerConfig;
try {
  config = loadServerConfig(Deno.env.toObject());
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  Deno.exit(1);
}

// Fail fast: no offline queue and no retries, so while Redis is down or frozen
// each request gets a 503 within REDIS_TIMEOUT_MS instead of piling up in memory.
const redis = new Redis(config.REDIS_URL, {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: config.REDIS_TIMEOUT_MS,
  connectTimeout: config.REDIS_TIMEOUT_MS,
  // Concurrent requests' pushes share one write to the socket.
  enableAutoPipelining: true,
  // Keep reconnecting in the background, at most a second apart.
  retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
});
let redisDown = false;
redis.on("error", (error) => {
  if (!redisDown) console.error(`redis unavailable, answering 503: ${error.message}`);
  redisDown = true;
});
redis.on("ready", () => {
  if (redisDown) console.log("redis is back");
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
});

const server = Deno.serve({
  port: config.PORT,
  hostname: "0.0.0.0",
  onListen: ({ port }) => console.log(`listening on :${port} (API_MODE=${config.API_MODE})`),
}, app.fetch);

let stopping: Promise<void> | undefined;
function stop(signal: string): Promise<void> {
  stopping ??= (async () => {
    console.log(`${signal}: finishing in-flight requests`);
    await server.shutdown();
    await Promise.allSettled([redis.quit(), sql.end({ timeout: 5 })]);
    // quit() fails while Redis is down or frozen, and ioredis then keeps
    // reconnecting, which would keep this process alive until SIGKILL.
    redis.disconnect();
    console.log("stopped");
  })();
  return stopping;
}
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void stop(signal));
}
await server.finished;
await stopping;
