/**
 * postgres.js clients for the tests, on the database a `PG*` environment names (a test server's
 * `env`, a native stack's): one place that maps the variables to options, as the services'
 * own `runtime/postgres_options.ts` does for theirs.
 *
 * @module
 */

import postgres from "postgres";

/** The `PG*` variables of a database. */
export type PostgresEnv = Readonly<Record<string, string | undefined>>;

/** postgres.js connection options for the database `env` names. */
export function postgresConnection(env: PostgresEnv) {
  return {
    host: env.PGHOST,
    port: Number(env.PGPORT),
    user: env.PGUSER,
    password: env.PGPASSWORD,
    database: env.PGDATABASE,
  };
}

/** A client of the database `env` names, with `max` connections and its notices muted. */
export function connectPostgres(env: PostgresEnv, max = 1): postgres.Sql {
  return postgres({ ...postgresConnection(env), max, onnotice: () => {} });
}
