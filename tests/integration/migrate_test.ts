/**
 * The schema's migration against a real PostgreSQL, raced: every consumer
 * applies it as it starts, so replicas starting together run it at once, and
 * the advisory lock must make that safe.
 */

import assert from "node:assert/strict";
import type postgres from "postgres";
import { migrate } from "@users-pipeline/schema";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { projectEnv, startPostgres, startRedis } from "@users-pipeline/harness/services";
import { delay, waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";
import { serviceEvents } from "../support/service_events.ts";

/** The migrations postgres-shift recorded, and whether table `users` exists. */
async function schemaOf(sql: postgres.Sql) {
  const applied = await sql<{ migration_id: number }[]>`
    select migration_id from migrations order by migration_id`;
  const [users] = await sql<{ exists: boolean }[]>`
    select to_regclass('users') is not null as exists`;
  return { applied: applied.map((row) => row.migration_id), users: users?.exists };
}

Deno.test("migrate() run by four sessions at once: every one succeeds and the schema is applied once", async () => {
  await using pg = await startPostgres();
  const clients = Array.from(
    { length: 4 },
    () => connectPostgres(pg.env),
  );
  try {
    const applied: number[] = [];
    const results = await Promise.allSettled(
      clients.map((sql) => migrate(sql, { onMigration: ({ id }) => applied.push(id) })),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      Array(4).fill("fulfilled"),
      String(
        results.find((r) => r.status === "rejected")?.reason,
      ),
    );
    assert.deepEqual(applied, [1], "the first session applied the migration, the others nothing");
    assert.deepEqual(await schemaOf(clients[0]!), { applied: [1], users: true });
  } finally {
    await Promise.all(clients.map((sql) => sql.end({ timeout: 5 })));
  }
});

Deno.test("two consumers started at once on an empty database both migrate, get ready and stop cleanly", async () => {
  await using pg = await startPostgres();
  await using redis = await startRedis();
  const ports = [freePort(), freePort()];
  const consumers = ports.map((port, i) =>
    new TaskProcess("consumer", {
      ...projectEnv(),
      ...pg.env,
      REDIS_URL: redis.url,
      QUEUE_NAME: "migrate-race",
      PORT: String(port),
    }, `consumer-${i + 1}`)
  );
  const sql = connectPostgres(pg.env);
  try {
    await Promise.all(ports.map((port, i) =>
      waitForHttp(`http://127.0.0.1:${port}/readyz`, {
        timeoutMs: 30_000,
        alive: () => consumers[i]!.running,
      }).catch((error) => {
        throw new Error(`${error.message}\n${consumers[i]!.output.join("\n")}`, { cause: error });
      })
    ));
    const migrating = consumers.map((c) => serviceEvents(c.output, "migrating").length);
    assert.deepEqual(migrating.toSorted(), [0, 1], "one of them applied the one migration");
    assert.deepEqual(await schemaOf(sql), { applied: [1], users: true });
    for (const consumer of consumers) assert.equal((await consumer.stop()).code, 0);
  } finally {
    await sql.end({ timeout: 5 });
    await Promise.all(consumers.map((consumer) => consumer[Symbol.asyncDispose]()));
  }
});

Deno.test("a consumer started before PostgreSQL says why it is not ready, then migrates once it is up", async () => {
  await using pg = await startPostgres();
  await using redis = await startRedis();
  await pg.server.stop("fast");
  const port = freePort();
  await using consumer = new TaskProcess("consumer", {
    ...projectEnv(),
    ...pg.env,
    REDIS_URL: redis.url,
    QUEUE_NAME: "migrate-late",
    PORT: String(port),
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/healthz`, { alive: () => consumer.running });
  const waiting = await fetch(`${url}/readyz`);
  assert.equal(waiting.status, 503);
  assert.deepEqual(await waiting.json(), {
    status: "not ready",
    reason: "starting: migrating the schema",
  });
  await pg.server.start();
  await waitForHttp(`${url}/readyz`, { timeoutMs: 30_000, alive: () => consumer.running });
  const events = serviceEvents(consumer.output).map((e) => [e.event, e.dependency]);
  assert.deepEqual(events.slice(1, 5), [
    ["outage_started", "postgres"],
    ["migrating", undefined],
    ["outage_ended", "postgres"],
    ["consumer_started", undefined],
  ], consumer.output.join("\n"));
  assert.equal((await consumer.stop()).code, 0);
});

Deno.test("a consumer on a database holding the course's users table says what it found and what to do, stays up unready without changing it, and starts once it is renamed", async () => {
  await using pg = await startPostgres();
  await using redis = await startRedis();
  const sql = connectPostgres(pg.env);
  const port = freePort();
  try {
    // The course chapter's table, with a user in it.
    await sql`create table users (id serial primary key, name text)`;
    await sql`insert into users (name) values ('Ada')`;
    await using consumer = new TaskProcess("consumer", {
      ...projectEnv(),
      ...pg.env,
      REDIS_URL: redis.url,
      QUEUE_NAME: "migrate-course",
      PORT: String(port),
      RETRY_MAX_DELAY_MS: "500",
    });
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/healthz`, { alive: () => consumer.running });
    await waitFor("the schema conflict in the log", () => {
      assert.ok(consumer.running, consumer.output.join("\n"));
      return serviceEvents(consumer.output, "schema_conflict").length > 0;
    }, { timeoutMs: 20_000 });
    // Several re-checks later: still up, still unready, said once, the table as it was.
    await delay(2_000);
    assert.ok(
      consumer.running,
      `it does not exit (a restart loop):\n${consumer.output.join("\n")}`,
    );
    const conflicts = serviceEvents(consumer.output, "schema_conflict");
    assert.equal(conflicts.length, 1, "said once");
    assert.match(
      String(conflicts[0]!.msg),
      /table "users" \(id integer, name text\).*ALTER TABLE users RENAME TO course_users.*PGDATABASE/,
    );
    const unready = await fetch(`${url}/readyz`);
    assert.equal(unready.status, 503);
    assert.match((await unready.json()).reason, /table "users" this pipeline did not create/);
    assert.deepEqual([...await sql`select id, name from users`], [{ id: 1, name: "Ada" }]);
    assert.equal(serviceEvents(consumer.output, "migrating").length, 0);

    await sql`alter table users rename to course_users`;
    await waitForHttp(`${url}/readyz`, { timeoutMs: 20_000, alive: () => consumer.running });
    assert.deepEqual(await schemaOf(sql), { applied: [1], users: true });
    assert.deepEqual([...await sql`select name from course_users`], [{ name: "Ada" }]);
    assert.equal((await consumer.stop()).code, 0);
  } finally {
    await sql.end({ timeout: 5 });
  }
});
