/**
 * The one way a process of ours makes a Redis client, opens it and closes it:
 * a standalone `Redis` at REDIS_URL, or a `Cluster` of REDIS_CLUSTER_NODES
 * with the same role's options lifted to the cluster (`redis_options.ts`),
 * so that the API, the consumer and the stack's tools reach the same Redis
 * the same way.
 *
 * @module
 */

import { Cluster, Redis, type RedisOptions } from "ioredis";
import { clusterNodes } from "./config.ts";
import type { Clock } from "./clock.ts";
import { abortable, timeoutSignal, withDeadline } from "./deadline.ts";
import { errorText, type EventLog } from "./event_log.ts";
import { clusterOptions, connectionOptions, type RedisConnectionConfig } from "./redis_options.ts";

/** A client of either kind. */
export type RedisConnection = Redis | Cluster;

/** Where the queue lives and how to log in: the queue variables of `config.ts`. */
export type RedisConfig = RedisConnectionConfig;

/** Options of {@linkcode createRedisClient}. */
export interface RedisClientOptions {
  /** The options of the client's role (`redis_options.ts`). */
  readonly role: RedisOptions;
  /**
   * Commands a Cluster client must send alone rather than auto-pipelined:
   * scripts whose first argument is their key count, not a key, which
   * auto-pipelining would take for the key to route by (the queue's
   * `SCRIPTS_WITH_KEY_COUNT`). @default none
   */
  readonly unpipelined?: readonly string[];
  /**
   * What becomes of the client's errors, of which ioredis emits one per
   * failed reconnect: `"ignore"` drops them, for a process that meets an
   * outage in its commands' failures and reports it there; a log records
   * `redis_unavailable` once when an outage starts, saying what the process
   * does `whileUnavailable` ("answering 503"), and `redis_ready` when each
   * connection is made.
   * @default not listened to: ioredis prints each one, which suits a short-lived tool
   */
  readonly errors?: "ignore" | { readonly log: EventLog; readonly whileUnavailable: string };
}

/**
 * A client of the Redis `config` names, with the options of its `role`
 * (`redis_options.ts`). A Cluster client takes `role.lazyConnect` as its own.
 */
export function createRedisClient(
  config: RedisConfig,
  options: RedisClientOptions,
): RedisConnection {
  const { role } = options;
  const { dnsLookup, ...connection } = connectionOptions(config);
  let client: RedisConnection;
  if (config.REDIS_CLUSTER_NODES === "") {
    // The credentials travel as options: ioredis would take a URL's user without a password
    // (`redis://app@host`) for an empty password over REDIS_PASSWORD.
    const url = new URL(config.REDIS_URL);
    url.username = "";
    url.password = "";
    client = new Redis(url.href, { ...role, ...connection });
  } else {
    const cluster = clusterOptions({ ...role, ...connection }, options.unpipelined);
    client = new Cluster(clusterNodes(config.REDIS_CLUSTER_NODES), {
      ...cluster,
      ...(dnsLookup === undefined ? {} : { dnsLookup }),
      ...(role.lazyConnect === undefined ? {} : { lazyConnect: role.lazyConnect }),
    });
  }
  const { errors } = options;
  if (errors === "ignore") {
    client.on("error", () => {});
  } else if (errors !== undefined) {
    const { log, whileUnavailable } = errors;
    // One record per outage is enough: ioredis emits an error per failed reconnect.
    let down = false;
    client.on("error", (error: Error) => {
      if (!down) {
        // A Cluster client's "Failed to refresh slots cache" keeps its cause (NOAUTH, a
        // certificate refused, …) in lastNodeError.
        const cause = (error as { lastNodeError?: unknown }).lastNodeError;
        const text = cause === undefined
          ? errorText(error)
          : `${errorText(error)} (${errorText(cause)})`;
        log.warn("redis_unavailable", {
          error,
          msg: `redis unavailable, ${whileUnavailable}: ${text}`,
        });
      }
      down = true;
    });
    client.on("ready", () => {
      log.info("redis_ready", { msg: down ? "redis is back" : "redis is ready" });
      down = false;
    });
  }
  return client;
}

/** Options of {@linkcode redisReady}. */
export interface RedisReadyOptions {
  /** Stop waiting after this long. @default Infinity */
  readonly timeoutMs?: number;
  /** Stop waiting when this aborts. @default never */
  readonly signal?: AbortSignal;
  /** Whose time the timeout is counted on. @default systemClock */
  readonly clock?: Clock;
}

/**
 * Resolves true once `client` is connected and ready for commands (at once if
 * it is), false when the timeout passed or the signal aborted first. Clients
 * without an offline queue fail every command sent before that.
 */
export async function redisReady(
  client: RedisConnection,
  options: RedisReadyOptions = {},
): Promise<boolean> {
  const { timeoutMs = Infinity, signal, clock } = options;
  if (client.status === "ready") return true;
  using bound = timeoutSignal(timeoutMs, { clock });
  const giveUp = signal === undefined ? bound.signal : AbortSignal.any([bound.signal, signal]);
  const ready = Promise.withResolvers<void>();
  const onReady = () => ready.resolve();
  client.once("ready", onReady);
  try {
    await abortable(ready.promise, giveUp);
    return true;
  } catch (error) {
    if (giveUp.aborted) return false;
    throw error;
  } finally {
    client.off("ready", onReady);
  }
}

/**
 * Says goodbye to Redis (QUIT, so that replies in flight are read first)
 * within `timeoutMs`, then disconnects for good. QUIT fails while Redis is
 * down or frozen, and ioredis then keeps reconnecting, which would keep the
 * process alive until it is killed.
 */
export async function closeRedis(client: RedisConnection, timeoutMs: number): Promise<void> {
  try {
    await withDeadline(client.quit(), { ms: timeoutMs, what: "say goodbye to Redis" });
  } catch {
    // Disconnected below all the same.
  } finally {
    client.disconnect();
  }
}
