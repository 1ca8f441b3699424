/**
 * The ingest benchmark's `direct` target: the course's first version, which
 * inserts each user into PostgreSQL before answering, built from the API's
 * own app (`createApp` from `server/app.ts`: metrics, content-type check,
 * body limit, JSON parse, validation, UUIDv7, 202 with the id) with an
 * `accept` that inserts the user (`schema/users_table.ts`), so that next to
 * the queue mode only the queue differs. Measured as the course has it: no
 * bound of ours on the insert, and no idempotency keys (nothing to record
 * them in). `/readyz` is 200 while PostgreSQL answers `select 1`.
 *
 * Reads env: PORT (default 8000), BODY_LIMIT_BYTES (default 16384), PGHOST,
 * PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { parseEnv } from "@users-pipeline/runtime/config";
import { Readiness } from "@users-pipeline/runtime/readiness";
import { postgresClients } from "@users-pipeline/runtime/postgres_client";
import { postgresVars } from "@users-pipeline/runtime/postgres_options";
import { findUser, insertUsers, listUsers } from "@users-pipeline/schema";
import { createApp } from "@users-pipeline/server/app";
import { serverVars } from "@users-pipeline/server/config";
import { ApiMetrics } from "@users-pipeline/server/metrics";
import { userStatusReader } from "@users-pipeline/server/user_status";

const config = parseEnv({
  PORT: serverVars.PORT,
  BODY_LIMIT_BYTES: serverVars.BODY_LIMIT_BYTES,
  ...postgresVars,
}, { service: "direct-server", env: Deno.env.toObject() });

const postgres = postgresClients(config);
// Enough connections for the requests the load generator keeps in flight to insert side by side.
const sql = postgres.connect({ max: 8 });

const app = createApp({
  accept: async (user) => void await insertUsers(sql, [user]),
  readiness: new Readiness({ postgres: () => sql`select 1` }, { timeoutMs: 1_000 }),
  // No index: the table alone says whether a user is stored.
  userStatus: userStatusReader({ findUser: (id) => findUser(sql, id) }),
  listUsers: (limit) => listUsers(sql, limit),
  bodyLimitBytes: config.BODY_LIMIT_BYTES,
  // Counted and timed as the API's every request is, so that it compares like with like.
  metrics: new ApiMetrics({ replica: "direct" }),
});

const server = Deno.serve({
  port: config.PORT,
  hostname: "0.0.0.0",
  onListen: ({ port }) => console.log(`listening on :${port} (direct: an INSERT per request)`),
}, app.fetch);

// Graceful on SIGTERM like the other servers, so the benchmark's stop is quick and clean and a
// CPU profile is written on exit.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void server.shutdown());
}
await server.finished;
await sql.end({ timeout: 5 });
postgres.destroyAll();
