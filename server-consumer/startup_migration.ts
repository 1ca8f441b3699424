/**
 * The consumer's first step: bring the schema up to date before taking any
 * work (`schema/migrate.ts`). Every replica does it as it starts, so no
 * service has to start before another: compose and Swarm may start them in
 * any order, and replicas racing are serialised by the migration's advisory
 * lock.
 *
 * While PostgreSQL cannot be reached (it may still be starting), the attempt
 * is retried with the loop's backoff, and the outage is reported once when it
 * starts and once when it ends, as the loop does. An error PostgreSQL
 * answered with (a bad password, a failing migration) is not retried: waiting
 * cannot cure it, so the process exits and says why. A table `users` this
 * pipeline did not create (the course's) is the exception: exiting would only
 * make the orchestrator restart the consumer in a loop, while the cure is an
 * operator's rename, so the consumer reports it once, stays up (not ready),
 * and checks again every `recheckMs` until the name is free. A stop ends the
 * wait at once, even mid-attempt.
 *
 * @module
 */

import type postgres from "postgres";
import type { EventLog } from "@users-pipeline/runtime/event_log";
import type { Readiness } from "@users-pipeline/runtime/readiness";
import { ForeignUsersTableError, migrate, type MigrateOptions } from "@users-pipeline/schema";
import type { PostgresClientOptions } from "@users-pipeline/runtime/postgres_client";
import { isUnreachable } from "@users-pipeline/runtime/postgres_options";
import { type Clock, systemClock } from "@users-pipeline/runtime/clock";
import { abortable } from "@users-pipeline/runtime/deadline";
import { backoffDelay, Outage, type OutageEvent } from "./backoff.ts";
import { logConsumerEvent } from "./consumer_log.ts";

/** Options of {@linkcode migrateOnStart}. */
export interface MigrateOnStartOptions {
  /** One attempt: applies the pending migrations. */
  readonly migrate: () => Promise<void>;
  /** Longest pause between two attempts. */
  readonly retryMaxDelayMs: number;
  /** Receives the start and the end of an outage. */
  readonly onEvent: (event: OutageEvent) => void;
  /** Told once when a table `users` this pipeline did not create is in the way. */
  readonly onForeignTable: (error: ForeignUsersTableError) => void;
  /** How long to wait before checking again whether that table is still there. */
  readonly recheckMs: number;
  /** Aborts when the process is told to stop. */
  readonly signal: AbortSignal;
  /** Whose time the pauses are counted on. @default systemClock */
  readonly clock?: Clock;
}

/**
 * Resolves true once the schema is up to date, false when `signal` aborted
 * first; rejects with the error of an attempt PostgreSQL answered with.
 */
export async function migrateOnStart(options: MigrateOnStartOptions): Promise<boolean> {
  const { migrate, retryMaxDelayMs, onEvent, onForeignTable, recheckMs, signal } = options;
  const { clock = systemClock } = options;
  const outage = new Outage("postgres", { onEvent });
  let blocked = false;
  while (!signal.aborted) {
    try {
      await abortable(migrate(), signal);
      outage.succeeded();
      return true;
    } catch (error) {
      // A stop came first: the attempt is abandoned, and so is the start.
      if (signal.aborted && error === signal.reason) return false;
      if (error instanceof ForeignUsersTableError) {
        outage.succeeded(); // PostgreSQL answered
        if (!blocked) onForeignTable(error);
        blocked = true;
        await clock.sleep(recheckMs, signal);
        continue;
      }
      if (!isUnreachable(error)) throw error;
      outage.failed(error);
      const delay = backoffDelay(outage.failures - 1, { maxMs: retryMaxDelayMs });
      await clock.sleep(delay, signal);
    }
  }
  return false;
}

/** Options of {@linkcode migrateSchemaOnStart}. */
export interface SchemaOnStartOptions {
  /** Makes a postgres.js client (`runtime/postgres_client.ts`). */
  readonly connect: (options: PostgresClientOptions) => postgres.Sql;
  /** Receives `migrating` per migration applied, the outage events and `schema_conflict`. */
  readonly log: EventLog;
  /** Told why the consumer is not ready while a table it did not create is in the way. */
  readonly readiness: Pick<Readiness, "starting">;
  /** Longest pause between two attempts, and between two checks of that table. */
  readonly retryMaxDelayMs: number;
  /** Aborts when the process is told to stop. */
  readonly signal: AbortSignal;
  /** Applies the pending migrations through `sql`. @default `migrate` of `schema/migrate.ts` */
  readonly migrate?: (sql: postgres.Sql, options: MigrateOptions) => Promise<void>;
}

/**
 * The consumer's first step as its process takes it: {@linkcode migrateOnStart}
 * on a client of one connection, so that the migration's advisory lock and its
 * statements share a session, each migration applied and a foreign table
 * logged. The client is ended once the step is over: at once (in flight or
 * not) on a stop or a failure. Resolves and rejects as `migrateOnStart`.
 */
export async function migrateSchemaOnStart(options: SchemaOnStartOptions): Promise<boolean> {
  const { connect, log, readiness, retryMaxDelayMs, signal } = options;
  const apply = options.migrate ?? migrate;
  // migrateOnStart retries with backoff; postgres.js' own would only delay it.
  const sql = connect({ max: 1, backoff: () => 0 });
  let migrated = false;
  try {
    migrated = await migrateOnStart({
      migrate: () =>
        apply(sql, {
          onMigration: ({ id, name }) =>
            log.info("migrating", { id, name, msg: `migrating ${id} ${name}` }),
        }),
      retryMaxDelayMs,
      onEvent: (event) => logConsumerEvent(log, event),
      onForeignTable: (error) => {
        log.error("schema_conflict", {
          error,
          msg: `${error.message} This consumer stays up, not ready, and checks again every ` +
            `${retryMaxDelayMs} ms.`,
        });
        readiness.starting('schema: a table "users" this pipeline did not create is in the way');
      },
      recheckMs: retryMaxDelayMs,
      signal,
    });
    return migrated;
  } finally {
    await sql.end({ timeout: migrated ? 5 : 0 });
  }
}
