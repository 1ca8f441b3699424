import assert from "node:assert/strict";
import type postgres from "postgres";
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

Deno.test("storeClientOptions() bounds each statement server-side too and leaves retrying to the loop", () => {
  const options = storeClientOptions(2_500);
  assert.equal(options.max, 2);
  assert.deepEqual(options.connection, { statement_timeout: 2_500 });
  assert.equal(options.backoff(), 0);
});
