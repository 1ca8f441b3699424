/**
 * The settings the scenarios give their services, and the bound each answer is held to under
 * them.
 *
 * @module
 */

import { projectEnv } from "@users-pipeline/harness/services";
import type { Outcome } from "./fault_load.ts";

/** Timings short enough that recovery happens within a test (see the issue). */
export const FAST_ENV: Readonly<Record<string, string>> = {
  HEARTBEAT_TTL_MS: "1000",
  RECOVERY_INTERVAL_MS: "200",
  STATEMENT_TIMEOUT_MS: "2000",
  REDIS_TIMEOUT_MS: "500",
  RETRY_MAX_DELAY_MS: "500",
  BLOCK_TIMEOUT_SECONDS: "1",
  SHUTDOWN_TIMEOUT_MS: "10000",
};

/**
 * A scenario's settings for a service, over the stage's; `undefined` puts a
 * variable back to project.env's value, its documented default.
 */
export type EnvChanges = Readonly<Record<string, string | undefined>>;

/**
 * The consumer's deadlines as project.env sets them (SHUTDOWN_TIMEOUT_MS,
 * STATEMENT_TIMEOUT_MS), instead of FAST_ENV's: what compose's 30 s grace
 * period must fit.
 */
export const PRODUCTION_DEADLINES: EnvChanges = {
  SHUTDOWN_TIMEOUT_MS: undefined,
  STATEMENT_TIMEOUT_MS: undefined,
};

/**
 * A service's settings: every variable of project.env (so none comes from the shell that runs the
 * tests), then `base` (the stage's servers and queue), {@linkcode FAST_ENV}, then each layer of
 * `changes` in turn.
 *
 * @throws {TypeError} when a change resets a variable project.env lacks.
 */
export function serviceEnv(
  base: Readonly<Record<string, string>>,
  ...changes: EnvChanges[]
): Record<string, string> {
  const defaults = projectEnv();
  const env: Record<string, string> = { ...defaults, ...base, ...FAST_ENV };
  for (const layer of changes) {
    for (const [name, value] of Object.entries(layer)) {
      const setting = value ?? defaults[name];
      if (setting === undefined) {
        throw new TypeError(`Cannot reset ${name} to its default as project.env does not set it`);
      }
      env[name] = setting;
    }
  }
  return env;
}

/**
 * How much later than its API's REDIS_TIMEOUT_MS an answer may reach the test's client. docs/delivery.md,
 * "Every answer is prompt": "The fault suite and the Redis Cluster tests hold every answer, 202 or
 * 503, to `REDIS_TIMEOUT_MS` plus 100 ms as their client times it: the API's timer and the
 * client's event loop may each fire late on a loaded 2-core machine."
 */
export const ANSWER_MARGIN_MS = 100;

/**
 * The delivery contract's bound on each answer, given each API's REDIS_TIMEOUT_MS by its URL: that timeout and
 * {@linkcode ANSWER_MARGIN_MS}.
 */
export function answerBound(redisTimeouts: ReadonlyMap<string, number>): (o: Outcome) => number {
  return (outcome) => {
    const timeoutMs = redisTimeouts.get(outcome.url);
    if (timeoutMs === undefined) {
      throw new TypeError(
        `Cannot bound the answer from ${outcome.url} as no API there was started`,
      );
    }
    return timeoutMs + ANSWER_MARGIN_MS;
  };
}
