/**
 * The postgres.js options every process of ours uses, derived from the parsed
 * PG* configuration, so that the API, the consumer and the migration connect
 * the same way.
 *
 * @module
 */

import type { Options } from "postgres";
import type { PostgresConfig } from "../queue/config.ts";

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
