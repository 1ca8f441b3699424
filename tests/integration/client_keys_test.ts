/**
 * Client keys and private reads through Traefik, against a real API replica, Redis, consumer and
 * PostgreSQL (the native stack) with CLIENT_KEYS_FILE and ADMIN_TOKEN set: a missing key, a wrong
 * key, a key in the query string and an oversized `Authorization` header each get their precise
 * 4xx and queue nothing; a right key's user is answered 202 and stored, counted under the client's
 * name on the replica's metrics; the refusals are logged without the key; the listing of stored
 * names needs the admin token. And a bad CLIENT_KEYS_FILE stops the API's start, naming the
 * variable and the line, never the key.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { queueShards } from "@users-pipeline/queue";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { freePort } from "@users-pipeline/harness/ports";
import { projectEnv, startTestStack, withStackOutput } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";

const ADA_KEY = crypto.randomUUID() + crypto.randomUUID();
const LIN_KEY = crypto.randomUUID() + crypto.randomUUID();
const ADMIN_TOKEN = crypto.randomUUID();

/** A keys file of two clients, in a temp dir removed at disposal. */
async function keysFile(text: string): Promise<{ path: string } & AsyncDisposable> {
  const dir = await Deno.makeTempDir({ prefix: "client-keys-" });
  const path = `${dir}/client_keys`;
  await Deno.writeTextFile(path, text);
  return { path, [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }) };
}

Deno.test("with CLIENT_KEYS_FILE, a request without the right key gets its precise 4xx and queues nothing; a right key's user is stored", async () => {
  await using file = await keysFile(
    `# test clients\nada ${ADA_KEY}\nlin ${LIN_KEY}\n`,
  );
  await using test = await startTestStack({
    servers: 1,
    consumers: 1,
    env: { CLIENT_KEYS_FILE: file.path, ADMIN_TOKEN },
  });
  const { stack } = test;
  const redis = new Redis(stack.env.REDIS_URL!);
  const sql = connectPostgres(stack.env, 1);
  const [keys] = queueShards(stack.env.QUEUE_NAME!);
  try {
    await withStackOutput(test, async () => {
      const id = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";
      const requests: [string, string, string?][] = [
        ["POST", "/users", '{"name": "Ada"}'],
        ["POST", "/users/batch", '[{"name": "Ada"}, {"name": "Lin"}]'],
        ["GET", `/users/${id}`],
      ];
      const refusals: [Record<string, string>, string, number, string, string | null][] = [
        [{}, "", 401, "key_missing", 'Bearer realm="users"'],
        [
          { Authorization: `Bearer ${ADA_KEY.slice(0, -1)}x` },
          "",
          401,
          "key_invalid",
          'Bearer realm="users", error="invalid_token"',
        ],
        [{ Authorization: `Bearer ${ADA_KEY}` }, `?api_key=${ADA_KEY}`, 400, "key_in_query", null],
        [
          { Authorization: `Bearer ${"k".repeat(2_048)}` },
          "",
          431,
          "authorization_too_large",
          null,
        ],
      ];
      for (const [method, path, body] of requests) {
        for (const [headers, query, status, code, authenticate] of refusals) {
          const res = await fetch(`${stack.url}${path}${query}`, { method, body, headers });
          const where = `${method} ${path}${query.slice(0, 9)}: ${code}`;
          assert.equal(res.status, status, where);
          assert.equal((await res.json()).code, code, where);
          assert.equal(res.headers.get("WWW-Authenticate"), authenticate, where);
        }
      }

      const accepted = await fetch(`${stack.url}/users`, {
        method: "POST",
        body: '{"name": "Keyed Ada"}',
        headers: { Authorization: `Bearer ${ADA_KEY}` },
      });
      assert.equal(accepted.status, 202);
      const { id: adaId } = await accepted.json();
      // FIFO: once the right key's user is stored, anything a refusal had pushed before it is too.
      await waitFor("the keyed user stored", async () => {
        const res = await fetch(`${stack.url}/users/${adaId}`, {
          headers: { Authorization: `Bearer ${LIN_KEY}` },
        });
        return res.status === 200 && (await res.json()).status === "stored";
      });
      const rows = await sql<{ name: string }[]>`select name from users`;
      assert.deepEqual(rows.map((row) => row.name), ["Keyed Ada"], "the refusals stored nothing");
      assert.equal(await redis.llen(keys!.queue), 0);

      // The replica counts the user under the client's name, and never shows a key.
      const metrics = await (await fetch(`http://127.0.0.1:${stack.ports.api[0]}/metrics`)).text();
      assert.match(
        metrics,
        /^users_pipeline_client_users_total\{client="ada",outcome="accepted"[^}]*\} 1$/m,
      );
      assert.match(
        metrics,
        /^users_pipeline_client_users_total\{client="lin",outcome="accepted"[^}]*\} 0$/m,
      );
      assert.ok(!metrics.includes(ADA_KEY) && !metrics.includes(LIN_KEY), "a key in /metrics");

      // Each refusal is logged with its code and address, at most once a second per pair.
      const log = test.output.tail(10_000);
      for (
        const code of ["key_missing", "key_invalid", "key_in_query", "authorization_too_large"]
      ) {
        assert.match(log, new RegExp(`"event":"credentials_refused".*"code":"${code}"`), code);
      }
      assert.match(log, /"event":"credentials_refused".*"address":"127\.0\.0\.1"/);
      assert.ok(!log.includes(ADA_KEY) && !log.includes(LIN_KEY), "a key in the log");

      // The stored names are the operator's to read.
      for (
        const headers of [{}, { Authorization: `Bearer ${ADA_KEY}` }] as Record<string, string>[]
      ) {
        const refused = await fetch(`${stack.url}/users?limit=5`, { headers });
        assert.equal(refused.status, 401);
        assert.equal((await refused.json()).code, "unauthorized");
      }
      const listed = await fetch(`${stack.url}/users?limit=5`, {
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      assert.equal(listed.status, 200);
      assert.deepEqual(
        (await listed.json()).users.map((user: { name: string }) => user.name),
        ["Keyed Ada"],
      );
    });
  } finally {
    redis.disconnect();
    await sql.end();
  }
});

Deno.test("a bad line in CLIENT_KEYS_FILE stops the API's start, naming the variable and the line, never the key", async () => {
  await using file = await keysFile(`ada ${ADA_KEY}\n\nlin ${LIN_KEY} trailing\n`);
  await using server = new TaskProcess("server", {
    ...projectEnv(),
    CLIENT_KEYS_FILE: file.path,
    PORT: String(freePort()),
    REPLICA_ID: "keys-1",
    // Never reached: the configuration is read first.
    REDIS_URL: `redis://127.0.0.1:${freePort()}`,
  });
  const status = await server.status;
  assert.equal(status.code, 1);
  const output = server.output.join("\n");
  assert.match(output, /"event":"config_invalid"/);
  assert.match(output, /CLIENT_KEYS_FILE line 3: must be `<name> <key>`/);
  assert.ok(!output.includes(ADA_KEY) && !output.includes(LIN_KEY), output);
});
