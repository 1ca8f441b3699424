import assert from "node:assert/strict";
import type postgres from "postgres";
import { ManualClock } from "@users-pipeline/runtime/manual_clock";
import { PostgresStore, storeClientOptions } from "./postgres_store.ts";

/** A postgres.js client whose every statement answers `reply()`, recording its end() calls. */
function fakeClient(reply: () => Promise<unknown>) {
  const ends: (number | undefined)[] = [];
  const sql = Object.assign(() => reply(), {
    end: (options: { timeout?: number } = {}) => {
      ends.push(options.timeout);
      return Promise.resolve();
    },
  });
  return { sql: sql as unknown as postgres.Sql, ends };
}

const user = { id: "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f", name: "Ada", enqueued_at: 0 };

Deno.test("PostgresStore replaces a client that missed the deadline and ends every client on close", async () => {
  const frozen = fakeClient(() => new Promise(() => {}));
  const healthy = fakeClient(() => Promise.resolve(Object.assign([], { count: 1 })));
  const clients = [frozen, healthy];
  const store = new PostgresStore(() => clients.shift()!.sql, 20);

  await assert.rejects(store.insert([user]), { message: /no reply within 20 ms/ });
  assert.deepEqual(frozen.ends, [0], "the frozen client is abandoned at once");
  assert.equal(await store.insert([user]), 1);

  const closing = store.close(1);
  assert.equal(store.close(1), closing, "a second close() returns the first promise");
  await closing;
  assert.deepEqual(frozen.ends, [0, 1]);
  assert.deepEqual(healthy.ends, [1]);
});

Deno.test("PostgresStore waits its deadline on the clock it is given, then abandons the client once", async () => {
  const frozen = fakeClient(() => new Promise(() => {}));
  const healthy = fakeClient(() => Promise.resolve(Object.assign([], { count: 1 })));
  const clients = [frozen, healthy];
  const clock = new ManualClock();
  const store = new PostgresStore(() => clients.shift()!.sql, 2_500, { clock });

  let failure: unknown;
  const inserting = store.insert([user]).catch((error) => failure = error);
  const reading = store.storedNames([user.id]).catch((error) => error);
  await clock.tick(2_499);
  assert.equal(failure, undefined);
  assert.deepEqual(frozen.ends, []);
  await clock.tick(1);
  await inserting;
  assert.match(
    String(failure),
    /^Error: Cannot wait for PostgreSQL any longer: no reply within 2500 ms$/,
  );
  assert.match(String(await reading), /no reply within 2500 ms/);
  assert.deepEqual(frozen.ends, [0], "both waits expired; the client is replaced once");
  assert.equal(await store.insert([user]), 1);
  assert.equal(clock.pending, 0);
  await store.close(1);
});

Deno.test("storeClientOptions() bounds each statement server-side too and leaves retrying to the loop", () => {
  const options = storeClientOptions(2_500);
  assert.equal(options.max, 2);
  assert.deepEqual(options.connection, { statement_timeout: 2_500 });
  assert.equal(options.backoff(), 0);
});
