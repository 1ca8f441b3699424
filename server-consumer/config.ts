/**
 * The consumer's configuration, parsed once from the environment by `main.ts`.
 *
 * @module
 */

import { z } from "zod";
import { type Env, intVar, parseEnv, processVars, queueVars } from "@users-pipeline/runtime/config";
import { postgresVars } from "@users-pipeline/runtime/postgres_options";
import type { ConsumerOptions } from "./consumer.ts";

/** Every variable the consumer reads, with its rule and default. */
export const consumerVars = {
  ...queueVars,
  ...postgresVars,
  ...processVars,
  /** `single` stores one row per statement; `batch` up to BATCH_SIZE rows per statement. */
  CONSUMER_MODE: z.enum(["single", "batch"]).default("batch"),
  /** Most rows per statement in batch mode (one unnest statement, so no parameter limit). */
  BATCH_SIZE: intVar(1, 10_000).default(1_000),
  /** A consumer silent for this long is presumed dead and its items are recovered. */
  HEARTBEAT_TTL_MS: intVar(1_000, 600_000).default(5_000),
  /** How often each consumer looks for dead consumers' items. */
  RECOVERY_INTERVAL_MS: intVar(100, 600_000).default(2_000),
  /** An item held by this many crashed consumers goes to the dead letters. */
  MAX_CRASHES: intVar(1, 100).default(3),
  /**
   * Client-side bound on one insert (a frozen server must not freeze the
   * loop), and on each probe of /readyz.
   */
  STATEMENT_TIMEOUT_MS: intVar(100, 600_000).default(10_000),
  /** Server-side blocking wait; short so the loop notices shutdown and Redis restarts. */
  BLOCK_TIMEOUT_SECONDS: intVar(1, 60).default(2),
  /** Longest pause between retries of a failing Redis or PostgreSQL call. */
  RETRY_MAX_DELAY_MS: intVar(10, 60_000).default(5_000),
  /** Time to finish the batch in hand after SIGTERM; below compose's stop_grace_period. */
  SHUTDOWN_TIMEOUT_MS: intVar(0, 600_000).default(20_000),
};

/** The consumer's parsed configuration. */
export type ConsumerConfig = ReturnType<typeof loadConsumerConfig>;

/** Parses the consumer's variables or throws a `TypeError` naming the bad ones. */
export function loadConsumerConfig(env: Env) {
  return parseEnv(consumerVars, { service: "server-consumer", env });
}

/** The loop's settings (`consumer.ts`), from the configuration. */
export function loopOptions(config: ConsumerConfig) {
  return {
    batchSize: batchSizeOf(config),
    heartbeatTtlMs: config.HEARTBEAT_TTL_MS,
    recoveryIntervalMs: config.RECOVERY_INTERVAL_MS,
    maxCrashes: config.MAX_CRASHES,
    blockTimeoutSeconds: config.BLOCK_TIMEOUT_SECONDS,
    retryMaxDelayMs: config.RETRY_MAX_DELAY_MS,
    shutdownTimeoutMs: config.SHUTDOWN_TIMEOUT_MS,
  } satisfies Partial<ConsumerOptions>;
}

/** Rows per statement: single mode is a batch of one through the same code path. */
export function batchSizeOf(config: Pick<ConsumerConfig, "CONSUMER_MODE" | "BATCH_SIZE">) {
  return config.CONSUMER_MODE === "single" ? 1 : config.BATCH_SIZE;
}
