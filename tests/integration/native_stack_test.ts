/**
 * The native stack end to end (k6 through Traefik to PostgreSQL), and the
 * Redis and PostgreSQL harness the other integration tests build on.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import postgres from "postgres";
import { queueKeys } from "@users-pipeline/queue";
import { ERROR_CODE_HEADER, NO_REPLICA_READY } from "@users-pipeline/server/api_error";
import {
  migrate,
  projectEnv,
  REPO_DIR,
  startPostgres,
  startRedis,
  startTestStack,
  withStackOutput,
} from "@users-pipeline/harness/services";
import { delay, waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { connectPostgres, postgresConnection } from "../support/postgres_client.ts";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";

// k6 and closed-loop clients as fast as the native stack answers: the file takes its turn with the
// Docker tests and the fault suite (load_turn.ts), so neither starves the other.
holdLoadTurnForFile("tests/integration/native_stack_test.ts");

/** How long the consumers get to drain what k6 queued: far more than a few thousand rows need. */
const DRAIN_TIMEOUT_MS = 60_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Runs k6 on tests/k6/smoke-k6.js against `baseUrl` and returns the ids it logged as accepted. */
async function runSmokeK6(baseUrl: string): Promise<string[]> {
  const result = await new Deno.Command("k6", {
    args: [
      "run",
      "--log-format=raw",
      "--no-color",
      "--quiet",
      "-e",
      `BASE_URL=${baseUrl}`,
      "tests/k6/smoke-k6.js",
    ],
    cwd: REPO_DIR,
    stdin: "null",
  }).output();
  const decoder = new TextDecoder();
  const output = decoder.decode(result.stdout) + decoder.decode(result.stderr);
  assert.equal(result.code, 0, `k6 failed (99 means a threshold failed):\n${output.slice(-4000)}`);
  return output.split("\n").flatMap((line) => {
    const match = /^accepted (\S+)$/.exec(line.trim());
    return match?.[1] === undefined ? [] : [match[1]];
  });
}

Deno.test("the native stack stores exactly the users k6 got 202 for, then stops cleanly", async () => {
  await using test = await startTestStack({ servers: 2, consumers: 2 });
  const { stack } = test;
  const sql = postgres({
    ...postgresConnection(stack.env),
    max: 1,
    onnotice: () => {},
  });
  const redis = new Redis(stack.env.REDIS_URL ?? "", { lazyConnect: true });
  try {
    await withStackOutput(test, async () => {
      // The course's command, the first request once the stack said it is ready: curl -X POST
      // …/users -d '{"name": "Queueing"}' sends the JSON with curl's default form content type.
      const response = await fetch(`${stack.url}/users`, {
        method: "POST",
        body: '{"name": "Queueing"}',
        headers: { "content-type": "application/x-www-form-urlencoded" },
      });
      assert.equal(response.status, 202, "the first POST after the ready line");
      const { id } = await response.json();
      assert.match(id, UUID);

      const accepted = await runSmokeK6(stack.url);
      console.log(`k6 got 202 for ${accepted.length} users`);
      assert.ok(accepted.length >= 50, `k6 logged only ${accepted.length} accepted ids`);
      accepted.push(id);

      const expected = new Set(accepted);
      assert.equal(expected.size, accepted.length, "the API handed out an id twice");
      await waitFor("every accepted user to be stored", async () => {
        const [row] = await sql<{ stored: number }[]>`select count(*)::int as stored from users`;
        return (row?.stored ?? 0) >= expected.size;
      }, { timeoutMs: DRAIN_TIMEOUT_MS, intervalMs: 200 }).catch(() => {
        // The assertions below say which users are missing.
      });
      const rows = await sql<{ id: string }[]>`select id::text from users`;
      const ids = rows.map((row) => row.id);
      assert.equal(new Set(ids).size, ids.length, "a user was stored twice");
      assert.deepEqual(
        { missing: [...expected].filter((id) => !ids.includes(id)).length, total: ids.length },
        { missing: 0, total: expected.size },
      );
      assert.deepEqual(new Set(ids), expected);

      await redis.connect();
      const keys = queueKeys(projectEnv().QUEUE_NAME ?? "users");
      assert.equal(await redis.llen(keys.queue), 0, "the queue was not drained");
    });
  } finally {
    redis.disconnect();
    await sql.end({ timeout: 5 });
  }

  const exit = await stack.stop();
  assert.deepEqual(Object.keys(exit.statuses).toSorted(), [
    "consumer-1",
    "consumer-2",
    "postgres",
    "redis",
    "server-1",
    "server-2",
    "traefik",
  ]);
  assert.ok(exit.clean, `not every process exited with 0: ${JSON.stringify(exit.statuses)}`);
});

Deno.test("the native stack restarts an API replica that was killed", async () => {
  await using test = await startTestStack({ servers: 1, consumers: 1 });
  const { stack } = test;
  await withStackOutput(test, async () => {
    const [server] = stack.servers;
    assert.ok(server);
    const killed = server.pid;
    server.kill("SIGKILL");
    const status = await server.exited;
    assert.equal(status.code, 137);
    await waitFor("server-1 to be restarted", () => server.restarts === 1, { timeoutMs: 30_000 });
    // The only replica: /readyz through Traefik answers 200 once it is back behind it.
    await waitForHttp(`${stack.url}/readyz`, { timeoutMs: 30_000, intervalMs: 200 });
    assert.ok(
      test.output.lines.includes("stack | server-1 exited with code 137; restarting"),
      "the restart was not announced",
    );
    assert.notEqual(server.pid, killed, "server-1 runs as a new process");
  });
  const exit = await stack.stop();
  assert.ok(exit.clean, JSON.stringify(exit.statuses));
});

Deno.test("an API replica stopped behind Traefik drains first: no client sees an error", async () => {
  await using test = await startTestStack({ servers: 2, consumers: 1 });
  const { stack } = test;
  await withStackOutput(test, async () => {
    const answers = new Map<string, number>();
    let sending = true;
    const workers = Array.from({ length: 8 }, async () => {
      while (sending) {
        let answer: string;
        try {
          const res = await fetch(`${stack.url}/users`, {
            method: "POST",
            body: JSON.stringify({ name: "drain" }),
            headers: { "Content-Type": "application/json" },
          });
          await res.body?.cancel();
          answer = String(res.status);
        } catch (error) {
          answer = error instanceof Error ? error.name : String(error);
        }
        answers.set(answer, (answers.get(answer) ?? 0) + 1);
      }
    });
    await delay(500);
    // As compose stops a replica: SIGTERM, and it must be gone within the grace period.
    const [server] = stack.servers;
    assert.ok(server);
    const stoppedAt = Date.now();
    const status = await server.stop({ signal: "SIGTERM", timeoutMs: 30_000 });
    const stopMs = Date.now() - stoppedAt;
    await delay(500);
    sending = false;
    await Promise.all(workers);
    const { SHUTDOWN_DRAIN_MS: drainMs = "" } = projectEnv();
    console.log(
      `server-1 SIGTERMed under load behind Traefik: exit ${status?.code} after ${stopMs} ms ` +
        `(SHUTDOWN_DRAIN_MS ${drainMs}); answers ${JSON.stringify(Object.fromEntries(answers))}`,
    );
    assert.equal(status?.code, 0);
    assert.ok(stopMs >= Number(drainMs), "it kept serving for SHUTDOWN_DRAIN_MS");
    assert.ok((answers.get("202") ?? 0) > 50, "inconclusive: too few requests");
    assert.deepEqual([...answers.keys()], ["202"], "every request got its 202, none a 502");
  });
  const exit = await stack.stop();
  assert.deepEqual(exit.statuses["server-1"]?.code, 0);
});

Deno.test("with no API replica ready, Traefik answers 503 with Retry-After and its error code", async () => {
  await using test = await startTestStack({ servers: 1, consumers: 1 });
  const { stack } = test;
  await withStackOutput(test, async () => {
    const [server] = stack.servers;
    assert.ok(server);
    // Draining, the only replica fails its health check and Traefik's failover answers instead.
    const stopped = server.stop({ signal: "SIGTERM", timeoutMs: 30_000 });
    let answer: { status: number; headers: Headers; body: string } | undefined;
    await waitFor("Traefik's own answer", async () => {
      const res = await fetch(`${stack.url}/users`, {
        method: "POST",
        body: JSON.stringify({ name: "nobody home" }),
        headers: { "Content-Type": "application/json" },
      });
      answer = { status: res.status, headers: res.headers, body: await res.text() };
      return res.headers.has(ERROR_CODE_HEADER);
    }, { timeoutMs: 20_000, intervalMs: 100 });
    assert.equal(answer?.status, 503);
    assert.equal(answer.headers.get(ERROR_CODE_HEADER), NO_REPLICA_READY);
    assert.equal(answer.headers.get("Retry-After"), "1");
    assert.equal(answer.body.trim(), "no available server");
    assert.equal((await stopped)?.code, 0);
  });
  await stack.stop();
});

Deno.test("startRedis() keeps acknowledged writes across a SIGKILL and restart (AOF)", async () => {
  await using service = await startRedis();
  const redis = new Redis(service.url, { maxRetriesPerRequest: 0, lazyConnect: true });
  try {
    await redis.connect();
    await redis.lpush("survivors", "a", "b", "c");
    redis.disconnect();
    service.server.kill("SIGKILL");
    assert.equal((await service.server.exited).code, 137);
    await service.server.restart();
    await redis.connect();
    assert.deepEqual(await redis.lrange("survivors", 0, -1), ["c", "b", "a"]);
  } finally {
    redis.disconnect();
  }
});

Deno.test("startPostgres() and migrate() give a users table that survives an immediate stop", async () => {
  await using service = await startPostgres();
  assert.match(await migrate(service.env), /schema is up to date/);
  const before = connectPostgres(service.env);
  try {
    await before`insert into users (id, name, enqueued_at)
      values ('01890000-0000-7000-8000-000000000001', 'Ada', now())`;
  } finally {
    await before.end({ timeout: 5 });
  }
  await service.server.stop("immediate");
  await service.server.start();
  const after = connectPostgres(service.env);
  try {
    const rows = await after<{ name: string }[]>`select name from users`;
    assert.deepEqual(rows.map((row) => row.name), ["Ada"]);
  } finally {
    await after.end({ timeout: 5 });
  }
});

Deno.test("PostgresServer.freeze() stalls queries until thaw()", async () => {
  await using service = await startPostgres();
  const sql = connectPostgres(service.env);
  try {
    await sql`select 1`;
    service.server.freeze();
    const query = sql`select 2 as answer`.then((rows) => rows[0]?.answer);
    const first = await Promise.race([query, delay(500).then(() => "stalled")]);
    assert.equal(first, "stalled");
    service.server.thaw();
    assert.equal(await query, 2);
  } finally {
    service.server.thaw();
    await sql.end({ timeout: 5 });
  }
});
