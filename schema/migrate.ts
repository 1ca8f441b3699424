/**
 * Applies `schema/migrations/` to the database named by the PG* variables,
 * then exits: 0 when the schema is current, 1 with the error otherwise. It logs
 * JSON lines (`queue/event_log.ts`): `migrating` per migration applied, then
 * `schema_up_to_date` or `migration_failed`.
 * Compose runs it as a one-shot service before the consumers start, and
 * `./stack` runs the same task, so there is one source of truth for the schema.
 *
 * Reads env: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import postgres from "postgres";
import shift from "postgres-shift";
import { fileURLToPath } from "node:url";
import { parseEnv } from "../queue/config.ts";
import { errorText, EventLog } from "../queue/event_log.ts";
import { type PostgresConfig, postgresOptions, postgresVars } from "./postgres_options.ts";

/** Any fixed number: it only has to be the same for every migrating process. */
const MIGRATION_LOCK_ID = 7_102_024;

const log = new EventLog("migrate");

/**
 * Runs the pending migrations. postgres-shift takes no lock itself, so two
 * processes starting at once (two stacks, a scaled service) are serialised with
 * an advisory lock; a one-connection client keeps the lock and the migration
 * on the same session.
 */
async function migrate(sql: postgres.Sql): Promise<void> {
  await sql`select pg_advisory_lock(${MIGRATION_LOCK_ID})`;
  try {
    await shift({
      sql,
      path: fileURLToPath(new URL("./migrations", import.meta.url)),
      before: ({ migration_id: id, name }: { migration_id: number; name: string }) =>
        log.info("migrating", { id, name, msg: `migrating ${id} ${name}` }),
    });
  } finally {
    await sql`select pg_advisory_unlock(${MIGRATION_LOCK_ID})`;
  }
}

if (import.meta.main) {
  let config: PostgresConfig;
  try {
    config = parseEnv("migrate", postgresVars, Deno.env.toObject());
  } catch (error) {
    log.error("config_invalid", { error, msg: errorText(error) });
    Deno.exit(1);
  }
  const sql = postgres({ ...postgresOptions(config), max: 1, onnotice: () => {} });
  try {
    // The database may still be starting (compose's healthcheck races its init scripts).
    for (let attempt = 1;; attempt++) {
      try {
        await sql`select 1`;
        break;
      } catch (error) {
        if (attempt >= 30) throw error;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
    await migrate(sql);
    log.info("schema_up_to_date", { msg: "schema is up to date" });
  } catch (error) {
    log.error("migration_failed", { error, msg: `migration failed: ${errorText(error)}` });
    Deno.exitCode = 1;
  } finally {
    await sql.end({ timeout: 5 });
  }
}
