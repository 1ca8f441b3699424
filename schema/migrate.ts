/**
 * The schema's migrations (`schema/migrations/`, applied by postgres-shift)
 * and {@linkcode migrate}, the one way they are applied: by every consumer as
 * it starts (so no service depends on start order, and N replicas may race:
 * the advisory lock makes that safe), and by `deno task migrate`, this
 * module run as a program.
 *
 * As a program it applies them to the database named by the PG* variables,
 * then exits: 0 when the schema is current, 1 with the error otherwise. It
 * logs JSON lines (`runtime/event_log.ts`): `migrating` per migration applied,
 * then `schema_up_to_date` or `migration_failed`. `./stack` runs it before
 * the replicas start, so a broken migration stops the stack at once.
 *
 * Reads env: PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGSSLROOTCERT.
 *
 * @module
 */

import type postgres from "postgres";
import shift from "postgres-shift";
import { fileURLToPath } from "node:url";
import { systemClock } from "@users-pipeline/runtime/clock";
import { parseEnv } from "@users-pipeline/runtime/config";
import { errorText, EventLog } from "@users-pipeline/runtime/event_log";
import { postgresClients } from "@users-pipeline/runtime/postgres_client";
import { type PostgresConfig, postgresVars } from "@users-pipeline/runtime/postgres_options";

/** Any fixed number: it only has to be the same for every migrating process. */
const MIGRATION_LOCK_ID = 7_102_024;

/** One migration, as postgres-shift names it. */
export interface Migration {
  readonly id: number;
  readonly name: string;
}

/** Options of {@linkcode migrate}. */
export interface MigrateOptions {
  /** Called before each pending migration is applied. @default does nothing */
  readonly onMigration?: (migration: Migration) => void;
}

/**
 * Raised by {@linkcode migrate} when the database already holds a table
 * `users` that this pipeline did not create: the course chapter's
 * `users (id serial, name text)`, say. Its rows have no UUID to be stored
 * under, and they are someone's data, so nothing is changed: the message says
 * what was found and what the operator can do.
 */
export class ForeignUsersTableError extends Error {
  override readonly name = "ForeignUsersTableError";
  /** The table's columns as found, `name type` each. */
  readonly columns: readonly string[];

  constructor(columns: readonly string[]) {
    super(
      `Cannot migrate as the database holds a table "users" (${columns.join(", ")}) that this ` +
        "pipeline did not create (the course's, perhaps): its users are stored under UUID ids, " +
        "and a table it did not create is never changed. Rename that table " +
        "(ALTER TABLE users RENAME TO course_users) or set PGDATABASE to another database.",
    );
    this.columns = columns;
  }
}

/** Throws {@linkcode ForeignUsersTableError} when `users` exists and is not this schema's. */
async function assertUsersTableIsOurs(sql: postgres.Sql): Promise<void> {
  const columns = await sql<{ column_name: string; data_type: string }[]>`
    select column_name, data_type from information_schema.columns
    where table_schema = current_schema() and table_name = 'users'
    order by ordinal_position`;
  if (columns.length === 0) return;
  // Every version of this schema keys users by a uuid id; nothing else has ever created it.
  if (columns.some((c) => c.column_name === "id" && c.data_type === "uuid")) return;
  throw new ForeignUsersTableError(columns.map((c) => `${c.column_name} ${c.data_type}`));
}

/**
 * Applies the pending migrations through `sql`, which must be a client of
 * one connection (`max: 1`) so that the lock and the migration share a
 * session. postgres-shift takes no lock itself, so processes migrating at
 * once (consumer replicas starting together, two stacks) are serialised with
 * an advisory lock: the first applies what is pending, the others then find
 * nothing left to do. A session that dies releases its lock.
 */
export async function migrate(sql: postgres.Sql, options: MigrateOptions = {}): Promise<void> {
  const { onMigration = () => {} } = options;
  await sql`select pg_advisory_lock(${MIGRATION_LOCK_ID})`;
  try {
    await assertUsersTableIsOurs(sql);
    await shift({
      sql,
      path: fileURLToPath(new URL("./migrations", import.meta.url)),
      before: ({ migration_id: id, name }: { migration_id: number; name: string }) =>
        onMigration({ id, name }),
    });
  } finally {
    await sql`select pg_advisory_unlock(${MIGRATION_LOCK_ID})`;
  }
}

if (import.meta.main) {
  const log = new EventLog("migrate");
  let config: PostgresConfig;
  try {
    config = parseEnv(postgresVars, { service: "migrate", env: Deno.env.toObject() });
  } catch (error) {
    log.error("config_invalid", { error, msg: errorText(error) });
    Deno.exit(1);
  }
  const clients = postgresClients(config);
  const sql = clients.connect({ max: 1 });
  try {
    // The database may still be starting (compose's healthcheck races its init scripts).
    for (let attempt = 1;; attempt++) {
      try {
        await sql`select 1`;
        break;
      } catch (error) {
        if (attempt >= 30) throw error;
        await systemClock.sleep(1_000);
      }
    }
    await migrate(sql, {
      onMigration: ({ id, name }) =>
        log.info("migrating", { id, name, msg: `migrating ${id} ${name}` }),
    });
    log.info("schema_up_to_date", { msg: "schema is up to date" });
  } catch (error) {
    log.error("migration_failed", { error, msg: `migration failed: ${errorText(error)}` });
    Deno.exitCode = 1;
  } finally {
    await sql.end({ timeout: 5 });
    clients.destroyAll();
  }
}
