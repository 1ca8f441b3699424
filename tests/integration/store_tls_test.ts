/**
 * TLS and passwords to Redis and PostgreSQL, as the settings docs/scaling.md gives for managed
 * services configure them, against real servers holding a certificate from a CA the test makes
 * (`tools/harness/test_ca.ts`), valid for `localhost` only.
 *
 * PostgreSQL runs with `ssl=on` and a pg_hba.conf that takes TCP connections over TLS only:
 * `PGSSLMODE=verify-full` with the CA in `PGSSLROOTCERT` stores a user; with another CA, or with
 * PGHOST an address the certificate does not name, it is refused, naming why; `verify-ca` takes
 * that address; `require` connects (the migration, run as the services run it) without checking
 * the certificate; `disable` is refused by the server.
 *
 * Redis listens for TLS with `requirepass`: a `rediss://` REDIS_URL with REDIS_PASSWORD and
 * REDIS_TLS_CA_FILE answers; another CA or a wrong password does not, and the client's log names
 * why. Then the API and the consumer, as processes, over TLS to both: a user posted is stored.
 *
 * @module
 */

import assert from "node:assert/strict";
import { v7 as uuidv7 } from "uuid";
import { parseEnv, queueVars } from "@users-pipeline/runtime/config";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { postgresClients } from "@users-pipeline/runtime/postgres_client";
import { postgresVars } from "@users-pipeline/runtime/postgres_options";
import { closeRedis, createRedisClient, redisReady } from "@users-pipeline/runtime/redis_client";
import { consumerCommandOptions } from "@users-pipeline/runtime/redis_options";
import { insertUsers, migrate as migrateSchema } from "@users-pipeline/schema";
import { serverUser } from "@users-pipeline/harness/postgres_server";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { freePort } from "@users-pipeline/harness/ports";
import { migrate, REPO_DIR, startPostgres, startRedis } from "@users-pipeline/harness/services";
import { makeTestCa, type TestCa } from "@users-pipeline/harness/test_ca";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";

const REDIS_PASSWORD = "tls-test-password";

/** A dir the servers' users can read, with the test's certificates in it. */
async function certificates(): Promise<{ dir: string; ca: TestCa }> {
  const dir = await Deno.makeTempDir({ prefix: "store-tls-" });
  await Deno.chmod(dir, 0o755);
  const ca = await makeTestCa(dir, { names: ["DNS:localhost"] });
  for (const file of [ca.caFile, ca.certFile, ca.otherCaFile]) await Deno.chmod(file, 0o644);
  // PostgreSQL reads its key only if no one else may (its server runs as `postgres` under root).
  const user = await serverUser();
  if (user !== undefined) await Deno.chown(ca.keyFile, user.uid, user.gid);
  await Deno.chmod(ca.keyFile, 0o600);
  return { dir, ca };
}

Deno.test({
  name: "PostgreSQL that takes TLS only: verify-full with its CA stores a user, the other " +
    "modes connect or are refused as libpq's names say",
  sanitizeResources: false,
  sanitizeOps: false,
}, async (t) => {
  const { dir, ca } = await certificates();
  try {
    await Deno.writeTextFile(
      `${dir}/pg_hba.conf`,
      "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
    );
    await Deno.chmod(`${dir}/pg_hba.conf`, 0o644);
    await using pg = await startPostgres({
      settings: {
        ssl: "on",
        ssl_cert_file: ca.certFile,
        ssl_key_file: ca.keyFile,
        hba_file: `${dir}/pg_hba.conf`,
      },
    });

    await t.step(
      "require: the migration connects over TLS, the certificate unchecked",
      async () => {
        // PGHOST is an address the certificate does not name, signed by a CA nobody was given.
        await migrate({ ...pg.env, PGSSLMODE: "require" });
      },
    );

    /** A client of the PG* variables `env` sets over the server's own, as the services make it. */
    const withClient = async <T>(
      env: Record<string, string>,
      use: (sql: ReturnType<ReturnType<typeof postgresClients>["connect"]>) => Promise<T>,
    ): Promise<T> => {
      const config = parseEnv(postgresVars, { service: "test", env: { ...pg.env, ...env } });
      const clients = postgresClients(config);
      const sql = clients.connect({ max: 1, connect_timeout: 5 });
      try {
        return await use(sql);
      } finally {
        await sql.end({ timeout: 1 });
        clients.destroyAll();
      }
    };

    await t.step(
      "verify-full with the CA: a user stored over a verified TLS connection",
      async () => {
        const id = uuidv7();
        const [row] = await withClient(
          { PGHOST: "localhost", PGSSLMODE: "verify-full", PGSSLROOTCERT: ca.caFile },
          async (sql) => {
            await migrateSchema(sql);
            assert.equal(
              await insertUsers(sql, [{ id, name: "over TLS", enqueued_at: Date.now() }]),
              1,
            );
            return await sql<{ name: string; ssl: boolean }[]>`
            select name, (select ssl from pg_stat_ssl where pid = pg_backend_pid()) as ssl
            from users where id = ${id}::uuid`;
          },
        );
        assert.deepEqual(row, { name: "over TLS", ssl: true });
      },
    );

    await t.step("verify-full refuses a certificate another CA signed, naming why", async () => {
      await assert.rejects(
        () =>
          withClient(
            { PGHOST: "localhost", PGSSLMODE: "verify-full", PGSSLROOTCERT: ca.otherCaFile },
            (sql) => sql`select 1`,
          ),
        /unable to verify the first certificate/,
      );
    });

    await t.step(
      "verify-full refuses an address the certificate does not name; verify-ca takes it",
      async () => {
        await assert.rejects(
          () =>
            withClient(
              { PGHOST: "127.0.0.1", PGSSLMODE: "verify-full", PGSSLROOTCERT: ca.caFile },
              (sql) => sql`select 1`,
            ),
          /Hostname\/IP does not match certificate's altnames/,
        );
        const [row] = await withClient(
          { PGHOST: "127.0.0.1", PGSSLMODE: "verify-ca", PGSSLROOTCERT: ca.caFile },
          (sql) =>
            sql<{ ssl: boolean }[]>`select ssl from pg_stat_ssl where pid = pg_backend_pid()`,
        );
        assert.equal(row?.ssl, true);
      },
    );

    await t.step("disable: the server refuses a connection without TLS", async () => {
      await assert.rejects(
        () => withClient({ PGSSLMODE: "disable" }, (sql) => sql`select 1`),
        (error: { code?: string; message?: string }) => {
          // invalid_authorization_specification: no pg_hba.conf line takes it.
          assert.equal(error.code, "28000");
          assert.match(error.message ?? "", /no pg_hba\.conf entry .*no encryption/);
          return true;
        },
      );
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "Redis over TLS with a password: rediss:// with REDIS_PASSWORD and REDIS_TLS_CA_FILE " +
    "answers, another CA or password does not, and the services store a user over it",
  sanitizeResources: false,
  sanitizeOps: false,
}, async (t) => {
  const { dir, ca } = await certificates();
  try {
    const tlsPort = freePort();
    // The plain port stays on loopback for the harness's readiness PING (which takes NOAUTH).
    await Deno.writeTextFile(
      `${dir}/redis.conf`,
      [
        `include ${REPO_DIR}/redis/redis.conf`,
        `tls-port ${tlsPort}`,
        `tls-cert-file ${ca.certFile}`,
        `tls-key-file ${ca.keyFile}`,
        `tls-ca-cert-file ${ca.caFile}`,
        "tls-auth-clients no",
        `requirepass ${REDIS_PASSWORD}`,
        "",
      ].join("\n"),
    );
    await using _redis = await startRedis({ configFile: `${dir}/redis.conf` });
    const url = `rediss://localhost:${tlsPort}`;

    /** What a client of the queue variables `env` meets within 5 s: PONG, or the error it logged. */
    const ping = async (env: Record<string, string>): Promise<string> => {
      const records: { msg?: string }[] = [];
      const log = new EventLog("test", { write: (line) => records.push(JSON.parse(line)) });
      const client = createRedisClient(parseEnv(queueVars, { service: "test", env }), {
        role: consumerCommandOptions,
        errors: { log, whileUnavailable: "waiting" },
      });
      try {
        if (await redisReady(client, { timeoutMs: 5_000 })) return await client.ping();
        return records.find((record) => record.msg?.startsWith("redis unavailable"))?.msg ??
          "no error logged";
      } finally {
        await closeRedis(client, 1_000);
      }
    };

    await t.step("the right CA and password: PONG over TLS", async () => {
      assert.equal(
        await ping({ REDIS_URL: url, REDIS_PASSWORD, REDIS_TLS_CA_FILE: ca.caFile }),
        "PONG",
      );
      // The password may be the URL's instead, as long as it is in one place.
      assert.equal(
        await ping({
          REDIS_URL: `rediss://:${REDIS_PASSWORD}@localhost:${tlsPort}`,
          REDIS_TLS_CA_FILE: ca.caFile,
        }),
        "PONG",
      );
    });

    await t.step("another CA: refused, the log naming the certificate", async () => {
      assert.match(
        await ping({ REDIS_URL: url, REDIS_PASSWORD, REDIS_TLS_CA_FILE: ca.otherCaFile }),
        // redis-server sends its CA along with its certificate; PostgreSQL only the certificate.
        /self-signed certificate in certificate chain/,
      );
    });

    await t.step("a wrong password: refused, the log naming it", async () => {
      assert.match(
        await ping({ REDIS_URL: url, REDIS_PASSWORD: "wrong", REDIS_TLS_CA_FILE: ca.caFile }),
        /WRONGPASS/,
      );
    });

    await t.step(
      "the API and the consumer over TLS to Redis and PostgreSQL: 202, then stored",
      async () => {
        await using pg = await startPostgres({
          settings: { ssl: "on", ssl_cert_file: ca.certFile, ssl_key_file: ca.keyFile },
        });
        await migrate({ ...pg.env, PGSSLMODE: "require" });
        const env = {
          ...pg.env,
          // The certificate names localhost, not PGHOST's 127.0.0.1: the chain is checked.
          PGSSLMODE: "verify-ca",
          PGSSLROOTCERT: ca.caFile,
          REDIS_URL: url,
          REDIS_PASSWORD,
          REDIS_TLS_CA_FILE: ca.caFile,
          QUEUE_NAME: "tls",
        };
        const apiPort = freePort();
        await using api = new TaskProcess("server", { ...env, PORT: String(apiPort) });
        await using consumer = new TaskProcess("consumer", { ...env, PORT: String(freePort()) });
        try {
          await waitForHttp(`http://127.0.0.1:${apiPort}/readyz`, { timeoutMs: 20_000 });
          const res = await fetch(`http://127.0.0.1:${apiPort}/users`, {
            method: "POST",
            body: JSON.stringify({ name: "over TLS end to end" }),
          });
          const body = await res.json();
          assert.equal(res.status, 202, JSON.stringify(body));
          await withStored(pg.env, body.id);
        } catch (error) {
          console.error([...api.output, ...consumer.output].join("\n"));
          throw error;
        }
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Waits until the user `id` is a row of the database `env` names (over TLS, unchecked). */
async function withStored(env: Record<string, string>, id: string): Promise<void> {
  const config = parseEnv(postgresVars, {
    service: "test",
    env: { ...env, PGSSLMODE: "require" },
  });
  const clients = postgresClients(config);
  const sql = clients.connect({ max: 1 });
  try {
    await waitFor(`user ${id} to be stored`, async () => {
      const rows = await sql`select 1 from users where id = ${id}::uuid`;
      return rows.length === 1;
    }, { timeoutMs: 20_000 });
  } finally {
    await sql.end({ timeout: 1 });
    clients.destroyAll();
  }
}
