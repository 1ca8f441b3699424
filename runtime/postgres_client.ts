/**
 * The one way a process of ours makes postgres.js clients: the connection
 * options of the PG* variables (`postgres_options.ts`), every socket tracked
 * so that the process can close them for good as it exits, notices dropped,
 * and the process kept alive when postgres.js's own unawaited query fails.
 *
 * @module
 */

import postgres from "postgres";
import {
  isArrayTypeFetchFailure,
  type PostgresConfig,
  postgresOptions,
  PostgresSockets,
} from "./postgres_options.ts";

/** postgres.js options a caller adds: pool size, statement bounds, hooks. */
export type PostgresClientOptions = postgres.Options<Record<string, never>>;

/** The clients of one process and their sockets. */
export interface PostgresClients {
  /** A client of the configured database; `options` add to (and win over) the common ones. */
  connect(options?: PostgresClientOptions): postgres.Sql;
  /**
   * Destroys every socket still open, once the clients were ended: one to a
   * frozen server would otherwise stay open after `end()` and keep the
   * process alive. Returns how many there were.
   */
  destroyAll(): number;
}

let ignoringArrayTypeFailures = false;

/**
 * The clients of the database `config` names. The first call also makes the
 * process ignore the one unhandled rejection it must survive: postgres.js's
 * own array-type query on each new connection is awaited by nothing, so
 * when that connection dies meanwhile (a backend terminated, a client thrown
 * away at its deadline), its rejection would end the process, every replica
 * at once (`isArrayTypeFetchFailure`).
 */
export function postgresClients(config: PostgresConfig): PostgresClients {
  if (!ignoringArrayTypeFailures) {
    globalThis.addEventListener("unhandledrejection", (event) => {
      if (isArrayTypeFetchFailure(event.reason)) event.preventDefault();
    });
    ignoringArrayTypeFailures = true;
  }
  const sockets = new PostgresSockets(config);
  return {
    connect: (options = {}) =>
      postgres({
        ...postgresOptions(config),
        ...sockets.options,
        onnotice: () => {},
        ...options,
      }),
    destroyAll: () => sockets.destroyAll(),
  };
}
