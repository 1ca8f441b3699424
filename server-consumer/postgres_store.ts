/**
 * The consumer's view of table `users`, with a client-side deadline on every
 * statement. A server-side `statement_timeout` cannot help when the server
 * itself is frozen (SIGSTOP, a hung disk, a partition): the reply simply never
 * comes. So when the deadline passes, the whole client is thrown away and a
 * new one is made; the batch stays in the processing list and is retried, and
 * the idempotent insert makes it harmless if the lost statement did commit.
 *
 * {@link PostgresStore.close} ends every client the store ever made, not only
 * the current one, and waits for all of them: a thrown-away client is ended
 * without waiting when it is replaced, and its connections may still be
 * closing at shutdown.
 *
 * @module
 */

import type postgres from "postgres";
import type { UserEnvelope } from "@users-pipeline/queue";
import { insertUsers, storedNames } from "@users-pipeline/schema";
import type { Clock } from "@users-pipeline/runtime/clock";
import { abortable, timeoutSignal } from "@users-pipeline/runtime/deadline";
import type { UserStore } from "./user_writer.ts";

/**
 * The postgres.js options of each client of the store, its statements bounded
 * server-side by `statementTimeoutMs` as well.
 */
export function storeClientOptions(statementTimeoutMs: number) {
  return {
    // Two: the insert of the batch taken early runs beside the one in
    // progress (see consumer.ts), not queued behind it on one connection.
    max: 2,
    // A server-side bound as well, for statements that run but never finish.
    connection: { statement_timeout: statementTimeoutMs },
    // No reconnect delay of postgres.js' own: the loop already retries with
    // backoff. After a long outage postgres.js would wait up to 20 s before
    // reconnecting, which only delays recovery, and a reconnect timer still
    // pending at shutdown reopens a socket after end(), so the process would
    // never exit.
    backoff: () => 0,
  } satisfies postgres.Options<Record<string, never>>;
}

/** Options of {@linkcode PostgresStore}. */
export interface PostgresStoreOptions {
  /** Whose time the deadline is counted on. @default systemClock */
  readonly clock?: Clock;
}

/** A {@link UserStore} over postgres.js that replaces its client after a timeout. */
export class PostgresStore implements UserStore {
  readonly #connect: () => postgres.Sql;
  readonly #timeoutMs: number;
  readonly #clock: Clock | undefined;
  readonly #clients: postgres.Sql[] = [];
  #sql: postgres.Sql;
  #closing: Promise<void> | undefined;

  /** `connect` makes a fresh client; it is called now and after each timeout. */
  constructor(
    connect: () => postgres.Sql,
    timeoutMs: number,
    options: PostgresStoreOptions = {},
  ) {
    this.#connect = connect;
    this.#timeoutMs = timeoutMs;
    this.#clock = options.clock;
    this.#sql = this.#newClient();
  }

  insert(users: readonly UserEnvelope[]): Promise<number> {
    return this.#withDeadline((sql) => insertUsers(sql, users));
  }

  storedNames(ids: readonly string[]): Promise<Map<string, string>> {
    return this.#withDeadline((sql) => storedNames(sql, ids));
  }

  /** `select 1` under the same deadline: whether PostgreSQL answers now (readiness). */
  async ping(): Promise<void> {
    await this.#withDeadline((sql) => sql`select 1`.then(() => {}));
  }

  /**
   * Ends every client this store made, letting queries in flight finish for up
   * to `seconds` before their connections are destroyed. A second call returns
   * the first call's promise.
   */
  close(seconds = 5): Promise<void> {
    this.#closing ??= Promise.all(
      this.#clients.map((sql) => sql.end({ timeout: seconds }).catch(() => {})),
    ).then(() => {});
    return this.#closing;
  }

  #newClient(): postgres.Sql {
    const sql = this.#connect();
    this.#clients.push(sql);
    return sql;
  }

  async #withDeadline<T>(work: (sql: postgres.Sql) => Promise<T>): Promise<T> {
    const sql = this.#sql;
    using bound = timeoutSignal(this.#timeoutMs, {
      clock: this.#clock,
      // A plain error: like any failure that is not about the data, the
      // consumer retries it, so nothing needs to tell it apart.
      reason: () =>
        new Error(`Cannot wait for PostgreSQL any longer: no reply within ${this.#timeoutMs} ms`),
    });
    bound.signal.addEventListener("abort", () => this.#abandon(sql), { once: true });
    return await abortable(work(sql), bound.signal);
  }

  /** Replaces `sql` (unless that was done already) and abandons its stuck connections without waiting on them. */
  #abandon(sql: postgres.Sql): void {
    if (this.#sql !== sql) return;
    this.#sql = this.#newClient();
    sql.end({ timeout: 0 }).catch(() => {});
  }
}
