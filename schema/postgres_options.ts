/**
 * How every process of ours reaches PostgreSQL: the libpq-style PG* variables
 * (the names postgres.js and `psql` understand) and the postgres.js options
 * derived from them, so that the API, the consumer and the migration read the
 * same variables and connect the same way. They live with the schema because
 * they name the database the schema is applied to.
 *
 * @module
 */

import type { Options } from "postgres";
import { z } from "zod";
import { intVar } from "../queue/config.ts";

/** The PG* variables with the course's defaults (compose's `database` service). */
export const postgresVars = {
  PGHOST: z.string().min(1).default("database"),
  PGPORT: intVar(1, 65_535).default(5432),
  PGUSER: z.string().min(1).default("username"),
  PGPASSWORD: z.string().default("password"),
  PGDATABASE: z.string().min(1).default("database"),
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
    // A connection attempt to an unreachable server fails in seconds, not minutes.
    connect_timeout: 5,
    // Prepared statements are reused per connection: the hot insert is parsed once.
    prepare: true,
  };
}
