/**
 * The queue as the stack's own tools (`./stack dlq`, `./stack stats`) reach
 * it: the same variables the services read (QUEUE_NAME, QUEUE_SHARDS,
 * REDIS_CLUSTER_NODES), so the tools see every shard, on a standalone Redis
 * or a Redis Cluster alike.
 *
 * @module
 */

import type { RedisOptions } from "ioredis";
import { type Env, parseEnv, queueVars } from "@users-pipeline/runtime/config";
import {
  type QueueKeys,
  queueShards,
  type RedisClient,
  SCRIPTS_WITH_KEY_COUNT,
} from "@users-pipeline/queue";
import { createRedisClient } from "@users-pipeline/runtime/redis_client";

/** A client and every shard's keys. */
export interface QueueClient {
  readonly redis: RedisClient;
  readonly keys: readonly QueueKeys[];
  /** True when `redis` is a Redis Cluster client. */
  readonly cluster: boolean;
}

/**
 * Connects `tool` to the queue `env` describes: `url` for a standalone Redis,
 * or the cluster of REDIS_CLUSTER_NODES; throws a `TypeError` naming a bad
 * variable.
 */
export function queueClient(
  tool: string,
  env: Env,
  url: string,
  options: RedisOptions = {},
): QueueClient {
  const { QUEUE_NAME, QUEUE_SHARDS, REDIS_CLUSTER_NODES } = parseEnv({
    QUEUE_NAME: queueVars.QUEUE_NAME,
    QUEUE_SHARDS: queueVars.QUEUE_SHARDS,
    REDIS_CLUSTER_NODES: queueVars.REDIS_CLUSTER_NODES,
  }, { service: tool, env });
  const cluster = REDIS_CLUSTER_NODES !== "";
  const redis = createRedisClient({ REDIS_URL: url, REDIS_CLUSTER_NODES }, {
    role: options,
    unpipelined: SCRIPTS_WITH_KEY_COUNT,
  });
  return { redis, keys: queueShards(QUEUE_NAME, { shards: QUEUE_SHARDS, cluster }), cluster };
}
