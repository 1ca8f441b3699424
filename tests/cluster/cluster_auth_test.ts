/**
 * The pipeline on a Redis Cluster whose nodes all require a password (`requirepass`, and
 * `masterauth` for their replicas' links): with REDIS_PASSWORD the API and the consumer log in to
 * every node they meet and a user posted is stored; without it, or with a wrong one, the API
 * answers 503 `queue_unavailable` within REDIS_TIMEOUT_MS and its log names the cause.
 *
 * Then the same cluster over TLS (`tls-cluster`, `tls-replication`, a certificate from a CA the
 * test makes for 127.0.0.1): `rediss://` seeds with REDIS_TLS_CA_FILE reach every master on its
 * TLS port; another CA is refused; the API and the consumer store a user over it.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Cluster } from "ioredis";
import { parseEnv, queueVars } from "@users-pipeline/runtime/config";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { closeRedis, createRedisClient, redisReady } from "@users-pipeline/runtime/redis_client";
import { consumerCommandOptions } from "@users-pipeline/runtime/redis_options";
import { RedisCluster } from "@users-pipeline/harness/redis_cluster";
import { makeTestCa } from "@users-pipeline/harness/test_ca";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { freePort } from "@users-pipeline/harness/ports";
import { migrate, startPostgres } from "@users-pipeline/harness/services";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";

const PASSWORD = "cluster-test-password";
/** The API's REDIS_TIMEOUT_MS here, project.env's. */
const REDIS_TIMEOUT_MS = 1_000;

/** `POST /users` of `name` to the API at `url`: its status, body and time. */
async function post(url: string, name: string) {
  const started = performance.now();
  const res = await fetch(`${url}/users`, { method: "POST", body: JSON.stringify({ name }) });
  return { status: res.status, body: await res.json(), ms: performance.now() - started };
}

/** Posts `count` users named `prefix i` to `url`, each answered 202, and waits until all are rows. */
async function postAllStored(
  url: string,
  sql: ReturnType<typeof connectPostgres>,
  prefix: string,
  count: number,
): Promise<void> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const { status, body } = await post(url, `${prefix} ${i}`);
    assert.equal(status, 202, JSON.stringify(body));
    ids.push(body.id);
  }
  await waitFor("the users to be stored", async () => {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from users where id = any(${ids}::uuid[])`;
    return row?.n === ids.length;
  }, { timeoutMs: 30_000 });
}

Deno.test({
  name: "a Redis Cluster with a password: REDIS_PASSWORD reaches every node, 202 then stored; " +
    "without it or with a wrong one, 503 queue_unavailable naming the cause",
  // The cluster's and the services' processes outlive the steps; each is closed at the end.
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  await using cluster = await RedisCluster.start({ password: PASSWORD });
  await using pg = await startPostgres();
  await migrate(pg.env);
  const sql = connectPostgres(pg.env);
  const env = {
    ...pg.env,
    REDIS_CLUSTER_NODES: cluster.seeds,
    REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
    // Six shards: the users' lists sit on all three masters, each logged in to.
    QUEUE_SHARDS: "6",
    QUEUE_NAME: `auth${Deno.pid}`,
  };
  /** An API replica with `extra` over `env`, and its URL. */
  const api = (extra: Record<string, string>) => {
    const port = freePort();
    const process = new TaskProcess("server", { ...env, ...extra, PORT: String(port) });
    return { process, url: `http://127.0.0.1:${port}` };
  };
  try {
    await t.step("with REDIS_PASSWORD: every user posted is stored", async () => {
      const server = api({ REDIS_PASSWORD: PASSWORD });
      await using _server = server.process;
      await using consumer = new TaskProcess("consumer", {
        ...env,
        REDIS_PASSWORD: PASSWORD,
        PORT: String(freePort()),
      });
      try {
        await waitForHttp(`${server.url}/readyz`, { timeoutMs: 30_000 });
        await postAllStored(server.url, sql, "cluster auth", 30);
      } catch (error) {
        console.error([...server.process.output, ...consumer.output].join("\n"));
        throw error;
      }
    });

    for (
      const [label, extra, cause] of [
        ["without REDIS_PASSWORD", {}, /NOAUTH/],
        ["with a wrong REDIS_PASSWORD", { REDIS_PASSWORD: "wrong" }, /WRONGPASS/],
      ] as const
    ) {
      await t.step(
        `${label}: 503 queue_unavailable within REDIS_TIMEOUT_MS, the log naming why`,
        async () => {
          const server = api(extra);
          await using _server = server.process;
          // It listens after REDIS_TIMEOUT_MS without Redis, so that /readyz can say why.
          await waitForHttp(`${server.url}/healthz`, { timeoutMs: 30_000 });
          // docs/api.md, "The rules of POST /users": "Redis answers within" REDIS_TIMEOUT_MS, or
          // 503 `queue_unavailable`; a Redis that refuses to log the API in never answers.
          const { status, body, ms } = await post(server.url, "refused");
          assert.equal(status, 503, JSON.stringify(body));
          assert.equal(body.code, "queue_unavailable");
          // docs/operations.md, "How the containers behave": "Every answer comes within".
          assert.ok(ms < REDIS_TIMEOUT_MS + 500, `answered in ${Math.round(ms)} ms`);
          const readyz = await fetch(`${server.url}/readyz`);
          await readyz.body?.cancel();
          assert.equal(readyz.status, 503);
          const unavailable = server.process.output.find((line) =>
            line.includes('"redis_unavailable"')
          );
          assert.match(unavailable ?? "no redis_unavailable record", cause);
          assert.ok(!server.process.output.join("\n").includes(PASSWORD), "no password logged");
        },
      );
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
});

Deno.test({
  name: "a Redis Cluster over TLS with a password: rediss:// seeds with REDIS_TLS_CA_FILE reach " +
    "every master over TLS, another CA is refused, and the services store a user over it",
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "cluster-tls-" });
  try {
    const ca = await makeTestCa(dir);
    await using cluster = await RedisCluster.start({ password: PASSWORD, tls: ca });
    const tlsPorts = new Set(cluster.nodes.map((node) => node.tlsPort));
    const base = { REDIS_CLUSTER_NODES: cluster.tlsSeeds, REDIS_PASSWORD: PASSWORD };
    /** A client of the queue variables `env`, its log's records kept. */
    const client = (env: Record<string, string>) => {
      const records: { msg?: string }[] = [];
      const log = new EventLog("test", { write: (line) => records.push(JSON.parse(line)) });
      const redis = createRedisClient(parseEnv(queueVars, { service: "test", env }), {
        role: consumerCommandOptions,
        errors: { log, whileUnavailable: "waiting" },
      }) as Cluster;
      return { redis, records };
    };

    await t.step("REDIS_TLS_CA_FILE: every master answers, over its TLS port", async () => {
      const { redis } = client({ ...base, REDIS_TLS_CA_FILE: ca.caFile });
      try {
        assert.ok(await redisReady(redis, { timeoutMs: 10_000 }), "ready");
        const masters = redis.nodes("master");
        assert.equal(masters.length, 3);
        for (const master of masters) {
          assert.ok(tlsPorts.has(master.options.port), `port ${master.options.port} is a TLS one`);
          assert.deepEqual(master.options.tls, { ca: await Deno.readTextFile(ca.caFile) });
          assert.equal(await master.ping(), "PONG");
        }
      } finally {
        await closeRedis(redis, 1_000);
      }
    });

    await t.step("another CA: refused, no master reached", async () => {
      const { redis, records } = client({ ...base, REDIS_TLS_CA_FILE: ca.otherCaFile });
      try {
        assert.equal(await redisReady(redis, { timeoutMs: 3_000 }), false);
        assert.equal(redis.nodes("master").length, 0);
        // ioredis asks for the slots on a connection whose errors it drops, so the cluster's
        // error says only that the connection closed, not why.
        assert.match(
          records.find((record) => record.msg?.startsWith("redis unavailable"))?.msg ?? "",
          /Failed to refresh slots cache/,
        );
      } finally {
        await closeRedis(redis, 1_000);
      }
    });

    await t.step("the API and the consumer over TLS: 202, then stored", async () => {
      await using pg = await startPostgres();
      await migrate(pg.env);
      const sql = connectPostgres(pg.env);
      const env = {
        ...pg.env,
        ...base,
        QUEUE_SHARDS: "6",
        QUEUE_NAME: `tls${Deno.pid}`,
        REDIS_TLS_CA_FILE: ca.caFile,
      };
      const port = freePort();
      await using server = new TaskProcess("server", { ...env, PORT: String(port) });
      await using consumer = new TaskProcess("consumer", { ...env, PORT: String(freePort()) });
      try {
        await waitForHttp(`http://127.0.0.1:${port}/readyz`, { timeoutMs: 30_000 });
        await postAllStored(`http://127.0.0.1:${port}`, sql, "cluster tls", 12);
      } catch (error) {
        console.error([...server.output, ...consumer.output].join("\n"));
        throw error;
      } finally {
        await sql.end({ timeout: 1 });
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
