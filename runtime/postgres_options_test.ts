import assert from "node:assert/strict";
import postgres from "postgres";
import { parseEnv } from "./config.ts";
import {
  isUnreachable,
  postgresOptions,
  PostgresSockets,
  postgresVars,
} from "./postgres_options.ts";

Deno.test("postgresOptions() connects to compose's database by default", () => {
  const options = postgresOptions(parseEnv(postgresVars, { service: "test", env: {} }));
  assert.deepEqual(
    [options.host, options.port, options.user, options.password, options.database],
    ["database", 5432, "username", "password", "database"],
  );
});

Deno.test("postgresVars rejects a port outside 1-65535, naming it", () => {
  assert.throws(
    () => parseEnv(postgresVars, { service: "test", env: { PGPORT: "70000" } }),
    /PGPORT .*current value is "70000"/,
  );
});

Deno.test("isUnreachable() tells a server out of reach from one that answered, by code", () => {
  const withCode = (code: string) => Object.assign(new Error("x"), { code });
  for (const code of ["ECONNREFUSED", "ENOTFOUND", "CONNECT_TIMEOUT", "57P03", "08006"]) {
    assert.ok(isUnreachable(withCode(code)), code);
  }
  for (const code of ["28P01", "42601", "3D000", "23505"]) {
    assert.ok(!isUnreachable(withCode(code)), code);
  }
  assert.ok(!isUnreachable(new Error("connect ECONNREFUSED")), "the message is not read");
  assert.ok(!isUnreachable(undefined));
});

Deno.test("PostgresSockets.destroyAll() closes what end() leaves open to a server that never answers", async () => {
  // A "server" that accepts and then says nothing, like a frozen PostgreSQL.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) accepted.push(conn);
  })();
  const sockets = new PostgresSockets({ PGHOST: "127.0.0.1", PGPORT: listener.addr.port });
  const sql = postgres({
    ...postgresOptions(parseEnv(postgresVars, { service: "test", env: {} })),
    host: "127.0.0.1",
    port: listener.addr.port,
    ...sockets.options,
    max: 1,
    onnotice: () => {},
  });
  try {
    const query = sql`select 1`.catch((error) => error);
    while (accepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    await sql.end({ timeout: 0.05 });
    assert.equal((await query).code, "CONNECTION_DESTROYED");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(sockets.open, 1, "end() left the socket half-closed, waiting for the server");
    assert.equal(sockets.destroyAll(), 1);
    assert.equal(sockets.open, 0);
  } finally {
    for (const conn of accepted) conn.close();
    listener.close();
    await accepting.catch(() => {});
  }
});
