/**
 * How every process of ours reaches PostgreSQL: the libpq-style PG* variables
 * (the names postgres.js and `psql` understand) and the postgres.js options
 * derived from them, so that the API, the consumer and the migration read the
 * same variables and connect the same way. They live with the schema because
 * they name the database the schema is applied to.
 *
 * @module
 */

import { connect, isIP, type Socket } from "node:net";
import type { ConnectionOptions } from "node:tls";
import type { Options } from "postgres";
import { z } from "zod";
import { intVar, pemFileVar } from "./config.ts";

/** The PG* variables with the course's defaults (compose's `database` service). */
export const postgresVars = {
  PGHOST: z.string().min(1).default("database"),
  PGPORT: intVar(1, 65_535).default(5432),
  PGUSER: z.string().min(1).default("username"),
  PGPASSWORD: z.string().default("password"),
  PGDATABASE: z.string().min(1).default("database"),
  /**
   * TLS to PostgreSQL, by libpq's names ({@linkcode postgresSsl} says what
   * each does). Unset is `disable`, where libpq's default is `prefer`.
   */
  PGSSLMODE: z.enum(["disable", "prefer", "require", "verify-ca", "verify-full"]).default(
    "disable",
  ),
  /**
   * CA certificates (PEM) the server's certificate must chain to, with
   * `verify-ca` and `verify-full`; unset: the runtime's trust store.
   */
  PGSSLROOTCERT: pemFileVar(),
};

/** The PostgreSQL connection part of a parsed configuration. */
export type PostgresConfig = Readonly<z.infer<z.ZodObject<typeof postgresVars>>>;

/** Connection options for postgres.js; callers add pool size and hooks. */
export function postgresOptions(config: PostgresConfig): Options<Record<string, never>> {
  return {
    host: config.PGHOST,
    port: config.PGPORT,
    user: config.PGUSER,
    password: config.PGPASSWORD,
    database: config.PGDATABASE,
    ssl: postgresSsl(config),
    // A connection attempt to an unreachable server fails in seconds, not minutes.
    connect_timeout: 5,
    // Prepared statements are reused per connection: the hot insert is parsed once.
    prepare: true,
  };
}

/**
 * postgres.js's `ssl` option for PGSSLMODE, as libpq means each mode:
 *
 * - `disable`: no TLS.
 * - `prefer`: TLS if the server offers it, else plain; the certificate is not checked.
 * - `require`: TLS or no connection; the certificate is not checked.
 * - `verify-ca`: TLS, and the certificate must chain to PGSSLROOTCERT's CAs
 *   (else the runtime's trust store); any host name is taken.
 * - `verify-full`: as `verify-ca`, and the certificate must also name PGHOST
 *   (a DNS name, or an IP address in its subject alternative names).
 *
 * The name to check is given here, since postgres.js leaves it unset for a
 * socket it did not open (`PostgresSockets`).
 */
export function postgresSsl(
  config: Pick<PostgresConfig, "PGHOST" | "PGSSLMODE" | "PGSSLROOTCERT">,
): false | "prefer" | "require" | ConnectionOptions {
  const mode = config.PGSSLMODE;
  if (mode === "disable") return false;
  if (mode === "prefer" || mode === "require") return mode;
  const verify: ConnectionOptions = {
    rejectUnauthorized: true,
    host: config.PGHOST,
    // SNI takes a DNS name only.
    servername: isIP(config.PGHOST) === 0 ? config.PGHOST : undefined,
    ...(config.PGSSLROOTCERT === undefined ? {} : { ca: config.PGSSLROOTCERT.pem }),
  };
  return mode === "verify-full" ? verify : { ...verify, checkServerIdentity: () => undefined };
}

/**
 * The error codes of a server that cannot be reached (yet): the network's,
 * postgres.js' own for a connection that broke or never opened, and
 * PostgreSQL's for a server that is starting, stopping or full.
 */
const UNREACHABLE = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "EPIPE",
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  // SQLSTATE: admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections.
  "57P01",
  "57P02",
  "57P03",
  "53300",
]);

/**
 * Whether `error` says PostgreSQL could not be reached (so waiting may cure
 * it), as opposed to one it answered (a bad password, a failing statement).
 * Decided on the error's code, never its message; SQLSTATE class 08
 * (connection exception) counts as unreachable.
 */
export function isUnreachable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && (UNREACHABLE.has(code) || /^08[0-9A-Z]{3}$/.test(code));
}

/**
 * Whether an unhandled rejection is postgres.js's own array-type query
 * failing. On each new connection postgres.js loads the array types with a
 * query of its own that nothing awaits (`fetch_types`, which the inserts'
 * `uuid[]`/`text[]` parameters need); when the connection dies meanwhile (a
 * backend terminated, a client thrown away at its deadline), that query's
 * rejection is unhandled and would end the process. It only ever concerns a
 * connection that is already gone: the next statement opens another and
 * meets the outage itself, so such a rejection can be ignored. Recognised by
 * the query postgres.js attaches to its errors, or by CONNECTION_DESTROYED,
 * which only a client ended on purpose raises.
 */
export function isArrayTypeFetchFailure(reason: unknown): boolean {
  const error = reason as { code?: unknown; query?: unknown } | null;
  return error?.code === "CONNECTION_DESTROYED" ||
    (typeof error?.query === "string" && /from pg_catalog\.pg_type a\b/.test(error.query));
}

/**
 * The sockets of postgres.js clients, so that a process can close them for
 * good as it exits. postgres.js ends a connection with a graceful half-close
 * and waits for the server to close its side; a server that does not answer
 * (frozen, behind a partition) never does, and the open socket then keeps the
 * process alive after `end()`. Spread {@linkcode PostgresSockets.options}
 * into the clients' options, end the clients, then {@linkcode destroyAll}.
 */
export class PostgresSockets {
  readonly #host: string;
  readonly #port: number;
  readonly #open = new Set<Socket>();

  constructor(config: Pick<PostgresConfig, "PGHOST" | "PGPORT">) {
    this.#host = config.PGHOST;
    this.#port = config.PGPORT;
  }

  /**
   * postgres.js' `socket` option (its README, "Custom socket"; its types
   * omit it): each connection a socket to the server, remembered until it
   * closes. postgres.js writes its startup message at once, which the socket
   * sends once connected, and handles its errors and close as its own.
   */
  readonly options = {
    socket: (): Socket => {
      const socket = connect(this.#port, this.#host);
      this.#open.add(socket);
      socket.once("close", () => this.#open.delete(socket));
      return socket;
    },
  } as Options<Record<string, never>>;

  /** How many sockets are open now. */
  get open(): number {
    return this.#open.size;
  }

  /** Destroys every socket still open; returns how many there were. */
  destroyAll(): number {
    const count = this.#open.size;
    for (const socket of this.#open) socket.destroy();
    this.#open.clear();
    return count;
  }
}
