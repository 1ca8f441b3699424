/**
 * The metrics against real processes, Redis and PostgreSQL: the API's
 * `/metrics` counts what it accepted and refused, the consumer's shows a
 * waiting backlog and its oldest item's age while it cannot store, then what
 * it stored once it can, and `promtool check metrics` finds nothing to say
 * about either endpoint's output. Also `readQueueStats()` against a real Redis.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { connectPostgres } from "../support/postgres_client.ts";
import { encodeEnvelope, queueKeys, readQueueStats, ShardedQueue } from "@users-pipeline/queue";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { migrate, startPostgres, startRedis } from "@users-pipeline/harness/services";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";

/** A scrape of `url`: its text, and the value of one series (labels in exposition order). */
async function scrape(url: string) {
  const res = await fetch(url);
  assert.equal(res.status, 200, url);
  assert.match(res.headers.get("Content-Type") ?? "", /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  const value = (series: string): number | undefined => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  return { text, value };
}

/** What `promtool check metrics` says about `text` (empty when it passes without warnings). */
async function promtoolCheck(text: string): Promise<{ success: boolean; said: string }> {
  const child = new Deno.Command("promtool", {
    args: ["check", "metrics"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const { success, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { success, said: (decoder.decode(stdout) + decoder.decode(stderr)).trim() };
}

const USER = (n: number) => ({
  id: `01934d5e-7b7c-7a1e-9c3f-${String(n).padStart(12, "0")}`,
  name: `user ${n}`,
});

Deno.test("readQueueStats() reads every list's depth and the oldest items' age from Redis", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const keys = queueKeys("stats");
    const queue = new ShardedQueue(redis, { keys: [keys] });
    const empty = await readQueueStats(redis, { keys: queue.keys, now: 10_000 });
    assert.deepEqual(empty, {
      depth: { queued: 0, retry: 0, processing: 0, dead: 0 },
      oldestAgeSeconds: { queued: 0, retry: 0 },
    });
    // As the API pushes: at the left, oldest first. The consumers take from the right.
    for (const [n, at] of [[1, 1_000], [2, 2_000], [3, 3_000]] as const) {
      await redis.lpush(keys.queue, encodeEnvelope({ ...USER(n), enqueued_at: at }));
    }
    await redis.lpush(keys.retry, encodeEnvelope({ ...USER(4), enqueued_at: 500 }));
    const stats = await readQueueStats(redis, { keys: queue.keys, now: 10_000 });
    assert.deepEqual(stats.depth, { queued: 3, retry: 1, processing: 0, dead: 0 });
    assert.deepEqual(stats.oldestAgeSeconds, { queued: 9, retry: 9.5 });
    // A poison item at the head has no age to tell.
    await redis.rpush(keys.queue, "not json");
    assert.equal(
      (await readQueueStats(redis, { keys: queue.keys, now: 10_000 })).oldestAgeSeconds.queued,
      undefined,
    );
  } finally {
    redis.disconnect();
  }
});

Deno.test("the API's and the consumer's /metrics count the pipeline's work and pass promtool", async (t) => {
  await using redisServer = await startRedis();
  await using pgServer = await startPostgres();
  await migrate(pgServer.env);
  const sql = connectPostgres(pgServer.env, 1);
  const redis = new Redis(redisServer.url);
  const env = (extra: Record<string, string>) => ({
    ...Deno.env.toObject(),
    ...pgServer.env,
    REDIS_URL: redisServer.url,
    QUEUE_NAME: "metrics",
    ...extra,
  });
  const apiPort = freePort();
  const apiUrl = `http://127.0.0.1:${apiPort}`;
  const outputs: Record<string, string> = {};
  try {
    await using api = new TaskProcess(
      "server",
      env({ PORT: String(apiPort), REPLICA_ID: "api-1" }),
    );
    await waitForHttp(`${apiUrl}/readyz`);
    const posted = 5;

    await t.step("the API counts accepted users and refusals by route, never by id", async () => {
      const ids: string[] = [];
      for (let n = 0; n < posted; n++) {
        const res = await fetch(`${apiUrl}/users`, {
          method: "POST",
          body: JSON.stringify({ name: `metered ${n}` }),
          headers: { "Content-Type": "application/json" },
        });
        assert.equal(res.status, 202);
        ids.push((await res.json()).id);
      }
      const invalid = await fetch(`${apiUrl}/users`, { method: "POST", body: "{" });
      assert.equal(invalid.status, 400);
      await invalid.body?.cancel();
      const lookup = await fetch(`${apiUrl}/users/${ids[0]}`);
      await lookup.body?.cancel();

      const { text, value } = await scrape(`${apiUrl}/metrics`);
      outputs.api = text;
      const labels = 'service="server",replica="api-1"';
      assert.equal(value(`users_pipeline_users_accepted_total{${labels}}`), posted);
      assert.equal(
        value(
          `users_pipeline_http_requests_total{method="POST",route="/users",status="202",${labels}}`,
        ),
        posted,
      );
      assert.equal(value(`users_pipeline_enqueue_rejections_total{reason="invalid",${labels}}`), 1);
      assert.equal(value(`users_pipeline_enqueue_rejections_total{reason="full",${labels}}`), 0);
      assert.match(text, /route="\/users\/:id"/);
      assert.ok(ids.every((id) => !text.includes(id)), "a user id became a label value");
      assert.match(text, /^process_cpu_seconds_total\{service="server",replica="api-1"\} /m);
    });

    // An item the API would never write, pushed after the users (so not the oldest).
    await redis.lpush("metrics", "not json");

    await t.step("the consumer shows the backlog and its age while it cannot store", async () => {
      // Pointed at a port where no PostgreSQL listens: it waits to migrate, and takes nothing.
      // Disposed (SIGKILL) at the end of the step, holding nothing.
      const port = freePort();
      await using _stuck = new TaskProcess(
        "consumer",
        env({ PORT: String(port), REPLICA_ID: "consumer-0", PGPORT: String(freePort()) }),
      );
      const url = `http://127.0.0.1:${port}/metrics`;
      await waitForHttp(`http://127.0.0.1:${port}/healthz`);
      const labels = 'service="server-consumer",replica="consumer-0"';
      let scraped = await scrape(url);
      await waitFor("the queue's gauges", async () => {
        scraped = await scrape(url);
        return scraped.value(`users_pipeline_queue_stats_up{${labels}}`) === 1;
      });
      const { value } = scraped;
      assert.equal(value(`users_pipeline_queue_depth{state="queued",${labels}}`), posted + 1);
      assert.equal(value(`users_pipeline_queue_depth{state="processing",${labels}}`), 0);
      const age = value(`users_pipeline_queue_oldest_age_seconds{state="queued",${labels}}`);
      assert.ok(age !== undefined && age > 0, `the oldest item's age is ${age}`);
      assert.equal(value(`users_pipeline_queue_oldest_age_seconds{state="retry",${labels}}`), 0);
      assert.equal(value(`users_pipeline_users_stored_total{${labels}}`), 0);
    });

    await t.step("the consumer counts what it stored and buried, and the latency", async () => {
      const port = freePort();
      await using consumer = new TaskProcess(
        "consumer",
        env({ PORT: String(port), REPLICA_ID: "consumer-1" }),
      );
      const url = `http://127.0.0.1:${port}/metrics`;
      const labels = 'service="server-consumer",replica="consumer-1"';
      await waitForHttp(`http://127.0.0.1:${port}/readyz`);
      let scraped = await scrape(url);
      await waitFor("every user stored and the poison buried", async () => {
        scraped = await scrape(url);
        return scraped.value(`users_pipeline_queue_depth{state="queued",${labels}}`) === 0 &&
          scraped.value(`users_pipeline_queue_depth{state="processing",${labels}}`) === 0;
      });
      const { text, value } = scraped;
      outputs.consumer = text;
      const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
      const count = row?.count;
      assert.equal(count, posted);
      assert.equal(value(`users_pipeline_users_stored_total{${labels}}`), count);
      assert.equal(
        value(`users_pipeline_dead_letters_total{reason="invalid_item",${labels}}`),
        1,
      );
      assert.equal(value(`users_pipeline_queue_depth{state="dead",${labels}}`), 1);
      assert.equal(value(`users_pipeline_enqueue_to_stored_seconds_count{${labels}}`), posted);
      assert.ok(value(`users_pipeline_enqueue_to_stored_seconds_sum{${labels}}`)! > 0);
      assert.equal(value(`users_pipeline_batch_items_sum{${labels}}`), posted + 1);
      assert.equal(value(`users_pipeline_insert_duration_seconds_count{${labels}}`), 1);
      assert.equal(value(`users_pipeline_queue_oldest_age_seconds{state="queued",${labels}}`), 0);
      assert.equal((await consumer.stop()).code, 0);
    });

    await t.step(
      "promtool check metrics passes both endpoints' output without a warning",
      async () => {
        for (const [name, text] of Object.entries(outputs)) {
          assert.deepEqual(await promtoolCheck(text), { success: true, said: "" }, name);
        }
        assert.deepEqual(Object.keys(outputs).toSorted(), ["api", "consumer"]);
      },
    );

    assert.equal((await api.stop()).code, 0);
  } finally {
    redis.disconnect();
    await sql.end();
  }
});
