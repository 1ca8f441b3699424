/**
 * The consumer's two Redis connections: one for short commands (the queue's
 * scripts, the readiness probe, the queue's gauges), which fail fast, and one
 * of its own for the blocking wait, which holds its connection (in a cluster,
 * to the node it waits on) for up to BLOCK_TIMEOUT_SECONDS at a time. Their
 * errors are not logged: the loop meets an outage in its calls and reports
 * it when it starts and when it ends.
 *
 * @module
 */

import { SCRIPTS_WITH_KEY_COUNT } from "@users-pipeline/queue";
import {
  closeRedis,
  createRedisClient,
  type RedisConfig,
  type RedisConnection,
  redisReady,
} from "@users-pipeline/runtime/redis_client";
import {
  consumerBlockingOptions,
  consumerCommandOptions,
} from "@users-pipeline/runtime/redis_options";

/** The two connections, opened together and closed together. */
export interface ConsumerRedis {
  readonly commands: RedisConnection;
  readonly blocking: RedisConnection;
  /**
   * Resolves true once both are connected (without an offline queue, a
   * command sent before that fails), false when `signal` aborted first.
   */
  ready(signal: AbortSignal): Promise<boolean>;
  /** Closes both for good, within `timeoutMs` even when Redis is frozen. */
  close(timeoutMs: number): Promise<void>;
}

/** Opens the consumer's connections to the Redis `config` names. */
export function consumerRedis(config: RedisConfig): ConsumerRedis {
  const commands = createRedisClient(config, {
    role: consumerCommandOptions,
    unpipelined: SCRIPTS_WITH_KEY_COUNT,
    errors: "ignore",
  });
  const blocking = createRedisClient(config, { role: consumerBlockingOptions, errors: "ignore" });
  return {
    commands,
    blocking,
    ready: async (signal) =>
      (await Promise.all([commands, blocking].map((client) => redisReady(client, { signal }))))
        .every(Boolean),
    close: async (timeoutMs) => {
      // The blocking connection holds nothing to flush, and quit() on it would wait for a
      // frozen Redis forever: disconnected at once, for good.
      blocking.disconnect();
      await closeRedis(commands, timeoutMs);
    },
  };
}
