import assert from "node:assert/strict";
import { parseEnv } from "./config.ts";
import { postgresClients } from "./postgres_client.ts";
import { postgresVars } from "./postgres_options.ts";

Deno.test("postgresClients() connects with the PG* options and tracks each socket until destroyAll()", async () => {
  // A "server" that accepts and then says nothing, like a frozen PostgreSQL.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) accepted.push(conn);
  })();
  const clients = postgresClients(
    parseEnv(postgresVars, {
      service: "test",
      env: { PGHOST: "127.0.0.1", PGPORT: String(listener.addr.port) },
    }),
  );
  const sql = clients.connect({ max: 1, connect_timeout: 1 });
  try {
    assert.equal(sql.options.max, 1, "the caller's options win");
    assert.equal(sql.options.port[0], listener.addr.port);
    const query = sql`select 1`.catch((error) => error);
    while (accepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    await sql.end({ timeout: 0.05 });
    assert.equal((await query).code, "CONNECTION_DESTROYED");
    assert.equal(clients.destroyAll(), 1, "end() left the socket to the silent server open");
    assert.equal(clients.destroyAll(), 0);
  } finally {
    for (const conn of accepted) conn.close();
    listener.close();
    await accepting.catch(() => {});
  }
});

Deno.test("postgresClients() makes the process survive only postgres.js's own array-type query failing", () => {
  postgresClients(parseEnv(postgresVars, { service: "test", env: {} }));
  postgresClients(parseEnv(postgresVars, { service: "test", env: {} }));
  const unhandled = (reason: unknown) => {
    const promise = Promise.reject(reason);
    promise.catch(() => {});
    const event = new PromiseRejectionEvent("unhandledrejection", {
      promise,
      reason,
      cancelable: true,
    });
    globalThis.dispatchEvent(event);
    return event.defaultPrevented;
  };
  assert.equal(unhandled({ code: "CONNECTION_DESTROYED" }), true);
  assert.equal(
    unhandled({ code: "57P01", query: "select b.oid, b.typarray from pg_catalog.pg_type a" }),
    true,
  );
  assert.equal(unhandled(new Error("anything else")), false);
});
