import assert from "node:assert/strict";
import type { PeerCertificate } from "node:tls";
import postgres from "postgres";
import { parseEnv } from "./config.ts";
import {
  isUnreachable,
  postgresOptions,
  PostgresSockets,
  postgresSsl,
  postgresVars,
} from "./postgres_options.ts";

Deno.test("postgresOptions() connects to compose's database by default", () => {
  const options = postgresOptions(parseEnv(postgresVars, { service: "test", env: {} }));
  assert.deepEqual(
    [options.host, options.port, options.user, options.password, options.database],
    ["database", 5432, "username", "password", "database"],
  );
  assert.equal(options.ssl, false, "no TLS unless PGSSLMODE asks");
});

Deno.test("postgresSsl() maps each PGSSLMODE onto postgres.js's ssl as libpq means it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    await Deno.writeTextFile(`${dir}/ca.pem`, pem);
    const ssl = (env: Record<string, string>) =>
      postgresSsl(
        parseEnv(postgresVars, { service: "test", env: { PGHOST: "db.example", ...env } }),
      );
    assert.equal(ssl({ PGSSLMODE: "disable" }), false);
    // postgres.js's own modes: TLS without a certificate check, prefer falling back to plain.
    assert.equal(ssl({ PGSSLMODE: "prefer" }), "prefer");
    assert.equal(ssl({ PGSSLMODE: "require" }), "require");
    const full = ssl({ PGSSLMODE: "verify-full", PGSSLROOTCERT: `${dir}/ca.pem` });
    assert.deepEqual(full, {
      rejectUnauthorized: true,
      host: "db.example",
      servername: "db.example",
      ca: pem,
    });
    const ca = ssl({ PGSSLMODE: "verify-ca", PGSSLROOTCERT: `${dir}/ca.pem` });
    assert.ok(typeof ca === "object" && ca.rejectUnauthorized === true && ca.ca === pem);
    // Node's own check, which verify-full keeps, refuses a name the certificate lacks.
    assert.equal(typeof ca.checkServerIdentity, "function", "verify-ca replaces the name check");
    assert.equal(ca.checkServerIdentity!("other.example", {} as PeerCertificate), undefined);
    // No SNI for an address; no ca: the runtime's trust store.
    assert.deepEqual(ssl({ PGSSLMODE: "verify-full", PGHOST: "10.0.0.5" }), {
      rejectUnauthorized: true,
      host: "10.0.0.5",
      servername: undefined,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("postgresVars names a bad PGSSLMODE, and a PGSSLROOTCERT unread or unused", async () => {
  const refused = (env: Record<string, string>, message: RegExp) =>
    assert.throws(() => parseEnv(postgresVars, { service: "test", env }), message);
  refused({ PGSSLMODE: "allow" }, /PGSSLMODE .*current value is "allow"/);
  refused(
    { PGSSLMODE: "verify-full", PGSSLROOTCERT: "/nonexistent/ca.pem" },
    /PGSSLROOTCERT cannot be read \(.*\): current value is "\/nonexistent\/ca.pem"/,
  );
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/ca.pem`, "-----BEGIN CERTIFICATE-----\n");
    refused(
      { PGSSLMODE: "require", PGSSLROOTCERT: `${dir}/ca.pem` },
      /PGSSLROOTCERT is only used with PGSSLMODE verify-ca or verify-full: current value is/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
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
