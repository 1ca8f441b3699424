import assert from "node:assert/strict";
import type { OutageEvent } from "./backoff.ts";
import { ForeignUsersTableError, type MigrateOptions } from "@users-pipeline/schema";
import type postgres from "postgres";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { ManualClock } from "@users-pipeline/runtime/manual_clock";
import type { PostgresClientOptions } from "@users-pipeline/runtime/postgres_client";
import { migrateOnStart, migrateSchemaOnStart } from "./startup_migration.ts";

const refused = () =>
  Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), {
    code: "ECONNREFUSED",
  });

Deno.test("migrateOnStart() waits out an unreachable PostgreSQL, reporting the outage once", async () => {
  const events: OutageEvent[] = [];
  let attempts = 0;
  const migrated = await migrateOnStart({
    migrate: () => ++attempts < 4 ? Promise.reject(refused()) : Promise.resolve(),
    retryMaxDelayMs: 5,
    onEvent: (event) => events.push(event),
    onForeignTable: () => assert.fail("no foreign table here"),
    recheckMs: 5,
    signal: new AbortController().signal,
  });
  assert.equal(migrated, true);
  assert.equal(attempts, 4);
  assert.deepEqual(events.map((e) => [e.event, e.dependency]), [
    ["outage_started", "postgres"],
    ["outage_ended", "postgres"],
  ]);
});

Deno.test("migrateOnStart() fails at once on an error PostgreSQL answered with", async () => {
  let attempts = 0;
  const broken = Object.assign(new Error('syntax error at or near "CREAT"'), { code: "42601" });
  await assert.rejects(
    migrateOnStart({
      migrate: () => {
        attempts++;
        return Promise.reject(broken);
      },
      retryMaxDelayMs: 5,
      onEvent: () => {},
      onForeignTable: () => assert.fail("no foreign table here"),
      recheckMs: 5,
      signal: new AbortController().signal,
    }),
    (error) => error === broken,
  );
  assert.equal(attempts, 1);
});

Deno.test("migrateOnStart() gives up at once when stopped, mid-attempt or between attempts", async () => {
  const hanging = new AbortController();
  const waiting = migrateOnStart({
    migrate: () => new Promise(() => {}),
    retryMaxDelayMs: 5,
    onEvent: () => {},
    onForeignTable: () => {},
    recheckMs: 5,
    signal: hanging.signal,
  });
  hanging.abort();
  assert.equal(await waiting, false);

  const backingOff = new AbortController();
  const retrying = migrateOnStart({
    migrate: () => Promise.reject(refused()),
    retryMaxDelayMs: 60_000,
    onEvent: () => {},
    onForeignTable: () => {},
    recheckMs: 5,
    signal: backingOff.signal,
  });
  await new Promise((resolve) => setTimeout(resolve, 20));
  const stoppedAt = Date.now();
  backingOff.abort();
  assert.equal(await retrying, false);
  assert.ok(Date.now() - stoppedAt < 1_000);
});

Deno.test("migrateOnStart() reports a foreign users table once and checks again until it is gone, or until stopped", async () => {
  const foreign = new ForeignUsersTableError(["id integer", "name text"]);
  const told: ForeignUsersTableError[] = [];
  let attempts = 0;
  const migrated = await migrateOnStart({
    migrate: () => ++attempts < 4 ? Promise.reject(foreign) : Promise.resolve(),
    retryMaxDelayMs: 60_000,
    onEvent: () => assert.fail("not an outage"),
    onForeignTable: (error) => told.push(error),
    recheckMs: 5,
    signal: new AbortController().signal,
  });
  assert.equal(migrated, true, "migrates once the table was renamed");
  assert.equal(attempts, 4);
  assert.deepEqual(told, [foreign], "said once, not at every check");
  assert.match(foreign.message, /"users" \(id integer, name text\).*RENAME TO/);

  const stop = new AbortController();
  const waiting = migrateOnStart({
    migrate: () => Promise.reject(foreign),
    retryMaxDelayMs: 5,
    onEvent: () => {},
    onForeignTable: () => stop.abort(),
    recheckMs: 60_000,
    signal: stop.signal,
  });
  assert.equal(await waiting, false, "a stop ends the wait");
});

Deno.test("migrateOnStart() checks a foreign table again each recheckMs on the clock it is given", async () => {
  const foreign = new ForeignUsersTableError(["id integer"]);
  const clock = new ManualClock();
  let attempts = 0;
  let migrated: boolean | undefined;
  const waiting = migrateOnStart({
    migrate: () => ++attempts < 3 ? Promise.reject(foreign) : Promise.resolve(),
    retryMaxDelayMs: 5,
    onEvent: () => {},
    onForeignTable: () => {},
    recheckMs: 60_000,
    signal: new AbortController().signal,
    clock,
  }).then((done) => migrated = done);
  await clock.tick(59_999);
  assert.equal(attempts, 1);
  await clock.tick(1);
  assert.equal(attempts, 2);
  await clock.tick(60_000);
  assert.equal(await waiting, true);
  assert.equal(migrated, true);
  assert.equal(attempts, 3);
  assert.equal(clock.pending, 0);
});

/** The parts `migrateSchemaOnStart` is given, recording what it does with them. */
function schemaStep(migrate: (sql: postgres.Sql, options: MigrateOptions) => Promise<void>) {
  const records: Record<string, unknown>[] = [];
  const connected: PostgresClientOptions[] = [];
  const ended: unknown[] = [];
  const starting: string[] = [];
  const sql = {
    end: (options: unknown) => {
      ended.push(options);
      return Promise.resolve();
    },
  } as unknown as postgres.Sql;
  const options = {
    connect: (options: PostgresClientOptions) => {
      connected.push(options);
      return sql;
    },
    log: new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) }),
    readiness: { starting: (reason: string) => void starting.push(reason) },
    retryMaxDelayMs: 5,
    signal: new AbortController().signal,
    migrate,
  };
  return { options, records, connected, ended, starting };
}

Deno.test("migrateSchemaOnStart() migrates on one connection of its own, logs each migration and ends it", async () => {
  const step = schemaStep((_sql, { onMigration }) => {
    onMigration?.({ id: 1, name: "create_users" });
    return Promise.resolve();
  });
  assert.equal(await migrateSchemaOnStart(step.options), true);
  assert.equal(step.connected.length, 1);
  assert.equal(step.connected[0]!.max, 1);
  assert.equal(step.connected[0]!.backoff instanceof Function, true);
  assert.deepEqual(
    step.records.map(({ event, id, name }) => ({ event, id, name })),
    [{ event: "migrating", id: 1, name: "create_users" }],
  );
  assert.deepEqual(step.ended, [{ timeout: 5 }]);
});

Deno.test("migrateSchemaOnStart() says once that a foreign users table is in the way, stays unready, and migrates once it is gone", async () => {
  let attempts = 0;
  const step = schemaStep(() =>
    ++attempts < 3
      ? Promise.reject(new ForeignUsersTableError(["id integer", "name text"]))
      : Promise.resolve()
  );
  assert.equal(await migrateSchemaOnStart(step.options), true);
  assert.deepEqual(step.records.map((r) => r.event), ["schema_conflict"]);
  assert.match(String(step.records[0]!.msg), /stays up, not ready, and checks again every 5 ms/);
  assert.deepEqual(step.starting, [
    'schema: a table "users" this pipeline did not create is in the way',
  ]);
});

Deno.test("migrateSchemaOnStart() ends its connection at once on a stop or a failure", async () => {
  const stopped = schemaStep(() => Promise.reject(refused()));
  const stop = new AbortController();
  stop.abort();
  assert.equal(await migrateSchemaOnStart({ ...stopped.options, signal: stop.signal }), false);
  assert.deepEqual(stopped.ended, [{ timeout: 0 }]);

  const broken = Object.assign(new Error("permission denied"), { code: "42501" });
  const failed = schemaStep(() => Promise.reject(broken));
  await assert.rejects(migrateSchemaOnStart(failed.options), /permission denied/);
  assert.deepEqual(failed.ended, [{ timeout: 0 }]);
});
