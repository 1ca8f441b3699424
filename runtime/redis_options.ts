/**
 * The ioredis options of each Redis client role of the pipeline, in one place
 * so the roles can be compared side by side. Every role fails fast: no
 * offline queue and no per-command retries, so a command sent while Redis is
 * down fails at once instead of queueing inside the client, and the caller
 * decides (the API answers 503, the consumer's loop retries with backoff).
 * Every role keeps reconnecting in the background.
 *
 * In a Redis Cluster (REDIS_CLUSTER_NODES) each role is a `Cluster` client
 * with {@linkcode clusterOptions}: the same options for its connection to
 * each node, and the same fail-fast behaviour for the cluster as a whole.
 *
 * @module
 */

import type { ClusterOptions, RedisOptions } from "ioredis";

/** Reconnect at most a second apart, whatever the number of attempts. */
function reconnectDelay(attempt: number): number {
  return Math.min(attempt * 100, 1_000);
}

const failFast = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  retryStrategy: reconnectDelay,
} satisfies RedisOptions;

/**
 * The API's one client. While Redis is down or frozen each request gets a 503
 * within `timeoutMs` instead of piling up in memory.
 */
export function apiRedisOptions(timeoutMs: number): RedisOptions {
  return {
    ...failFast,
    commandTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    // Concurrent requests' pushes share one write to the socket.
    enableAutoPipelining: true,
  };
}

/**
 * The consumer's client for short commands (the queue scripts). 10 s bounds a
 * call to a frozen Redis; the loop then retries it, which the scripts make safe.
 */
export const consumerCommandOptions: RedisOptions = {
  ...failFast,
  connectTimeout: 2_000,
  commandTimeout: 10_000,
};

/**
 * The consumer's client for the blocking wait, a connection of its own. No
 * command timeout: the wait is bounded by its own server-side timeout and a
 * client-side guard (`blocking_wait.ts`).
 */
export const consumerBlockingOptions: RedisOptions = {
  ...failFast,
  connectTimeout: 2_000,
};

/**
 * The options of a `Cluster` client for a role whose standalone options are
 * `role`: the per-node options, and the queueing and reconnecting ones
 * lifted to the cluster (ioredis ignores them per node). Reads and writes
 * all go to masters: the queue never reads what a replica may not have yet.
 * A command that meets a failover (MOVED, CLUSTERDOWN, TRYAGAIN, a closed
 * node) is retried by the client every 100 ms up to its redirection limit;
 * the API's own deadline still answers 503 within REDIS_TIMEOUT_MS, and a
 * push that runs later than that does nothing (`lua/includes/past_deadline.lua`).
 */
export function clusterOptions(
  role: RedisOptions,
  unpipelined: readonly string[] = [],
): ClusterOptions {
  const {
    enableOfflineQueue,
    retryStrategy: _perNode,
    enableAutoPipelining,
    ...redisOptions
  } = role;
  return {
    enableOfflineQueue,
    enableAutoPipelining,
    autoPipeliningIgnoredCommands: [...unpipelined],
    clusterRetryStrategy: reconnectDelay,
    scaleReads: "master",
    redisOptions,
  };
}
