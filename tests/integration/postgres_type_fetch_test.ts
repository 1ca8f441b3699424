/**
 * postgres.js loads the array types with a query of its own on each new
 * connection, and nothing awaits it: against a real PostgreSQL whose backends
 * are terminated as they connect, its rejections come unhandled, and they are
 * all that comes unhandled. Both services ignore exactly those
 * (`isArrayTypeFetchFailure`), which kept a consumer from dying in the fault
 * suite's backend-termination scenario; nothing else may be ignored.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { isArrayTypeFetchFailure } from "@users-pipeline/runtime/postgres_options";
import { startPostgres } from "@users-pipeline/harness/services";

Deno.test("postgres.js's own array-type query rejects unhandled when its backend is terminated, and isArrayTypeFetchFailure() recognises every such rejection", async () => {
  await using pg = await startPostgres();
  const client = (name: string) =>
    postgres({
      host: pg.env.PGHOST,
      port: pg.port,
      user: pg.env.PGUSER,
      password: pg.env.PGPASSWORD,
      database: pg.env.PGDATABASE,
      max: 1,
      connection: { application_name: name },
      onnotice: () => {},
    });
  const unhandled: unknown[] = [];
  const onRejection = (event: PromiseRejectionEvent) => {
    unhandled.push(event.reason);
    event.preventDefault();
  };
  globalThis.addEventListener("unhandledrejection", onRejection);
  const killer = client("killer");
  let killing = true;
  const killerLoop = (async () => {
    while (killing) {
      await killer`
        select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'victim'`
        .catch(() => {});
    }
  })();
  let clients = 0;
  try {
    const until = Date.now() + 2_000;
    while (Date.now() < until) {
      const victim = client("victim");
      // An array parameter, as the consumer's insert sends: it needs the array types.
      await victim`select ${["Ada"]}::text[]`.catch(() => {});
      await victim.end({ timeout: 0 }).catch(() => {});
      clients++;
    }
  } finally {
    killing = false;
    await killerLoop;
    await killer.end();
    await new Promise((resolve) => setTimeout(resolve, 200));
    globalThis.removeEventListener("unhandledrejection", onRejection);
  }
  assert.ok(unhandled.length > 0, `inconclusive: no unhandled rejection from ${clients} clients`);
  const others = unhandled.filter((reason) => !isArrayTypeFetchFailure(reason));
  assert.deepEqual(others.map(String), [], "only the array-type query's rejections are ignored");
  // And nothing of a query of ours is taken for it.
  const ours = Object.assign(new Error("terminating connection"), {
    code: "57P01",
    query: "select ...",
  });
  assert.equal(isArrayTypeFetchFailure(ours), false);
});
