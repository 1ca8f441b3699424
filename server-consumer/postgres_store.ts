/**
 * The consumer's view of table `users`, with a client-side deadline on every
 * statement. A server-side `statement_timeout` cannot help when the server
 * itself is frozen (SIGSTOP, a hung disk, a partition): the reply simply never
 * comes. So when the deadline passes, the whole client is thrown away and a
 * new one is made; the batch stays in the processing list and is retried, and
 * the idempotent insert makes it harmless if the lost statement did commit.
 *
 * @module
 */

import type postgres from "postgres";
import type { UserEnvelope } from "../queue/envelope.ts";
import { insertUsers, storedNames } from "../schema/users_table.ts";
import type { UserStore } from "./user_writer.ts";

/** Raised when a statement outlived its deadline; transient by nature. */
export class StatementTimeoutError extends Error {
  constructor(ms: number) {
    super(`Cannot wait for PostgreSQL any longer: no reply within ${ms} ms`);
    this.name = "StatementTimeoutError";
  }
}

/** A {@link UserStore} over postgres.js that replaces its client after a timeout. */
export class PostgresStore implements UserStore {
  readonly #connect: () => postgres.Sql;
  readonly #timeoutMs: number;
  #sql: postgres.Sql;

  /** `connect` makes a fresh client; it is called now and after each timeout. */
  constructor(connect: () => postgres.Sql, timeoutMs: number) {
    this.#connect = connect;
    this.#timeoutMs = timeoutMs;
    this.#sql = connect();
  }

  insert(users: readonly UserEnvelope[]): Promise<Set<string>> {
    return this.#withDeadline((sql) => insertUsers(sql, users));
  }

  storedNames(ids: readonly string[]): Promise<Map<string, string>> {
    return this.#withDeadline((sql) => storedNames(sql, ids));
  }

  /** Closes the current client, letting queries in flight finish for up to `seconds`. */
  close(seconds = 5): Promise<void> {
    return this.#sql.end({ timeout: seconds });
  }

  async #withDeadline<T>(work: (sql: postgres.Sql) => Promise<T>): Promise<T> {
    const sql = this.#sql;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        if (this.#sql === sql) {
          this.#sql = this.#connect();
          // Abandon the stuck connections without waiting on them.
          sql.end({ timeout: 0 }).catch(() => {});
        }
        reject(new StatementTimeoutError(this.#timeoutMs));
      }, this.#timeoutMs);
    });
    try {
      return await Promise.race([work(sql), deadline]);
    } finally {
      clearTimeout(timer);
    }
  }
}
