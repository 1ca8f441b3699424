/**
 * The API's configuration, parsed once from the environment by `main.ts`.
 *
 * @module
 */

import { z } from "zod";
import { type Env, intVar, parseEnv, processVars, queueVars } from "@users-pipeline/runtime/config";
import { postgresVars } from "@users-pipeline/runtime/postgres_options";

/** Every variable the API reads, with its rule and default. */
export const serverVars = {
  ...queueVars,
  ...postgresVars,
  ...processVars,
  /**
   * The bound that keeps a backlog from exhausting Redis' memory, over all
   * shards: each shard's list holds at most its share (rounded up).
   */
  QUEUE_MAX_LENGTH: intVar(1, 100_000_000).default(1_000_000),
  /**
   * How long an `Idempotency-Key` is remembered after its user was queued: a
   * retry within it gets the first answer; after it, the key is new again.
   * A day (Stripe's retention) outlasts any client's retries.
   */
  IDEMPOTENCY_TTL_SECONDS: intVar(1, 30 * 86_400).default(86_400),
  /**
   * Largest request body accepted; a bigger one gets 413, after the API read it to its end (up to
   * `OVERSIZED_BODY_DISCARD_BYTES`, `app.ts`) so that a client that sends it whole reads the 413.
   */
  BODY_LIMIT_BYTES: intVar(64, 1_048_576).default(16_384),
  /** Most users one `POST /users/batch` may carry; more is a 413 `too_many_items`. */
  BATCH_MAX_ITEMS: intVar(1, 100_000).default(1_000),
  /**
   * Largest `POST /users/batch` body; a bigger one gets 413 as `BODY_LIMIT_BYTES` does. 1 MiB
   * holds 1,000 users whose names are 200 characters of 4 bytes each in UTF-8.
   */
  BATCH_BODY_LIMIT_BYTES: intVar(64, 16_777_216).default(1_048_576),
  /**
   * With N > 0 a push is answered 202 only once `WAIT N` says N replicas
   * hold it: a failover then cannot lose an accepted user. 0: no waiting
   * (replication stays asynchronous). Consumers never wait (`server-consumer/main.ts`).
   */
  REDIS_WAIT_REPLICAS: intVar(0, 100).default(0),
  /** How long one `WAIT` may take; fewer replicas by then means "unconfirmed". */
  REDIS_WAIT_TIMEOUT_MS: intVar(1, 60_000).default(200),
  /** How long the API waits for Redis before answering 503 (it never hangs). */
  REDIS_TIMEOUT_MS: intVar(50, 60_000).default(1_000),
  /**
   * After SIGTERM, how long the API keeps serving while /readyz already
   * answers 503, before it closes its listener. Traefik checks /readyz every
   * second and keeps sending requests until it sees the 503; a listener
   * closed before that turns them into 502s. 2 s covers one check interval,
   * its 1 s timeout, and a margin, within compose's 30 s stop_grace_period.
   */
  SHUTDOWN_DRAIN_MS: intVar(0, 20_000).default(3_000),
  /**
   * Bearer token of the `/admin/…` routes (dead letters, overview); empty
   * means those routes do not exist. At least 16 characters: it guards
   * requeue and purge.
   */
  ADMIN_TOKEN: z.string().min(16, "must be at least 16 characters").regex(
    /^[\x21-\x7e]+$/,
    "must be printable ASCII without spaces (it travels in a header)",
  ).default(""),
  /**
   * A file naming each client and its key, `<name> <key>` a line (`client_keys.ts`): with it,
   * `POST /users`, `POST /users/batch` and `GET /users/:id` need `Authorization: Bearer <key>`.
   * Empty: no keys, anyone may call them. `main.ts` reads it once at start.
   */
  CLIENT_KEYS_FILE: z.string().default(""),
  /**
   * Users a second each client may send, over every replica together (`rate_limit.ts`): a
   * client is its key's name, or without keys its address. 0: no limit.
   */
  RATE_LIMIT_USERS_PER_SECOND: intVar(0, 1_000_000).default(0),
  /**
   * Most users a client may send at once (an idle client's allowance). At least
   * BATCH_MAX_ITEMS, so that every batch the API takes can fit.
   */
  RATE_LIMIT_BURST: intVar(1, 100_000_000).default(1_000),
};

/** The API's parsed configuration. */
export type ServerConfig = ReturnType<typeof loadServerConfig>;

/** Parses the API's variables or throws a `TypeError` naming the bad ones. */
export function loadServerConfig(env: Env) {
  const config = parseEnv(serverVars, { service: "server", env });
  // A push may run up to half of REDIS_TIMEOUT_MS late (its deadline); its
  // WAIT must end within the other half, or every slow confirmation would be
  // a timeout rather than an answer.
  const waitBound = Math.floor(config.REDIS_TIMEOUT_MS / 2);
  if (config.REDIS_WAIT_REPLICAS > 0 && config.REDIS_WAIT_TIMEOUT_MS > waitBound) {
    throw new TypeError(
      `Cannot start server: REDIS_WAIT_TIMEOUT_MS must be at most half of REDIS_TIMEOUT_MS ` +
        `(${waitBound}): current value is "${env.REDIS_WAIT_TIMEOUT_MS}"`,
    );
  }
  if (config.RATE_LIMIT_USERS_PER_SECOND > 0 && config.RATE_LIMIT_BURST < config.BATCH_MAX_ITEMS) {
    throw new TypeError(
      `Cannot start server: RATE_LIMIT_BURST must be at least BATCH_MAX_ITEMS ` +
        `(${config.BATCH_MAX_ITEMS}), or a full batch could never fit: current value is ` +
        `"${env.RATE_LIMIT_BURST ?? ""}"`,
    );
  }
  return config;
}
