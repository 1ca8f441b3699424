/**
 * The pipeline on a Redis Cluster whose nodes all require a password (`requirepass`, and
 * `masterauth` for their replicas' links): with REDIS_PASSWORD the API and the consumer log in to
 * every node they meet and a user posted is stored; without it, or with a wrong one, the API
 * answers 503 `queue_unavailable` within REDIS_TIMEOUT_MS and its log names the cause.
 *
 * @module
 */

import assert from "node:assert/strict";
import { RedisCluster } from "@users-pipeline/harness/redis_cluster";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { freePort } from "@users-pipeline/harness/ports";
import { migrate, startPostgres } from "@users-pipeline/harness/services";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";

const PASSWORD = "cluster-test-password";
/** The API's REDIS_TIMEOUT_MS here, project.env's. */
const REDIS_TIMEOUT_MS = 1_000;

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
  const post = async (url: string, name: string) => {
    const started = performance.now();
    const res = await fetch(`${url}/users`, { method: "POST", body: JSON.stringify({ name }) });
    return { status: res.status, body: await res.json(), ms: performance.now() - started };
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
        const ids: string[] = [];
        for (let i = 0; i < 30; i++) {
          const { status, body } = await post(server.url, `cluster auth ${i}`);
          assert.equal(status, 202, JSON.stringify(body));
          ids.push(body.id);
        }
        await waitFor("the users to be stored", async () => {
          const [row] = await sql<{ n: number }[]>`
            select count(*)::int as n from users where id = any(${ids}::uuid[])`;
          return row?.n === ids.length;
        }, { timeoutMs: 30_000 });
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
