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
 * Every role logs in and speaks TLS alike: {@linkcode connectionOptions}.
 *
 * @module
 */

import type { ClusterOptions, RedisOptions } from "ioredis";
import { type PemFile, redisTls } from "./config.ts";

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

/** The queue variables of `config.ts` that say how to reach Redis and log in. */
export interface RedisConnectionConfig {
  readonly REDIS_URL: string;
  /** Empty for a standalone Redis at REDIS_URL. */
  readonly REDIS_CLUSTER_NODES: string;
  /** @default "" */
  readonly REDIS_USERNAME?: string;
  /** @default "" */
  readonly REDIS_PASSWORD?: string;
  /** @default the runtime's trust store */
  readonly REDIS_TLS_CA_FILE?: PemFile;
}

/**
 * The options every role adds for the connection itself, to the standalone
 * client or to each node of a cluster: the ACL user and password, from
 * REDIS_USERNAME and REDIS_PASSWORD or else a standalone REDIS_URL's own
 * (`config.ts` refuses one given in both), and
 * TLS when the URL or the nodes say `rediss://`, verified against
 * REDIS_TLS_CA_FILE. ioredis checks the certificate against the address it
 * connects to: a seed node as written (hence the identity `dnsLookup`, which
 * keeps ioredis from swapping a host name for its IP), the other nodes as
 * the cluster announces them.
 */
export function connectionOptions(
  config: RedisConnectionConfig,
): RedisOptions & Pick<ClusterOptions, "dnsLookup"> {
  const tls = redisTls(config);
  const ca = config.REDIS_TLS_CA_FILE?.pem;
  const url = config.REDIS_CLUSTER_NODES === "" ? URL.parse(config.REDIS_URL) : null;
  const username = config.REDIS_USERNAME || decodeURIComponent(url?.username ?? "");
  const password = config.REDIS_PASSWORD || decodeURIComponent(url?.password ?? "");
  return {
    ...(username ? { username } : {}),
    ...(password ? { password } : {}),
    ...(tls ? { tls: ca === undefined ? {} : { ca } } : {}),
    ...(tls && config.REDIS_CLUSTER_NODES !== ""
      ? { dnsLookup: (address, found) => found(null, address) }
      : {}),
  };
}
