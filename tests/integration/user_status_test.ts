/**
 * A user's status through every state against a real Redis and PostgreSQL,
 * with the real consumer loop in-process: queued (in the main list, and while
 * in the retry list after a consumer crashed), stored, dead with its reason
 * (refused by the database; buried after crashing consumers), unknown; and
 * items pushed without the index (the course's raw LPUSH) consumed as before.
 * And the answer while either store is stopped: a 503 with Retry-After and the
 * code of the store, never a 500.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { connectPostgres } from "../support/postgres_client.ts";
import { v7 as uuidv7 } from "uuid";
import {
  DeadLetters,
  encodeEnvelope,
  queueKeys,
  ShardedQueue,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { depthOf, enqueueAll } from "@users-pipeline/harness/queue_fill";
import { apiRedisOptions } from "@users-pipeline/runtime/redis_options";
import { findUser, insertUsers, listUsers } from "@users-pipeline/schema";
import { Consumer } from "@users-pipeline/consumer/consumer";
import { PostgresStore } from "@users-pipeline/consumer/postgres_store";
import { createApp } from "@users-pipeline/server/app";
import { userStatusReader } from "@users-pipeline/server/user_status";
import { migrate, startPostgres, startRedis } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";

function user(name: string): UserEnvelope {
  return { id: uuidv7(), name, enqueued_at: Date.now() };
}

Deno.test("GET /users/<id>'s status goes queued → stored, queued → dead, and stays queued in retry", async () => {
  await using redisServer = await startRedis();
  await using pgServer = await startPostgres();
  await migrate(pgServer.env);
  const connect = () => connectPostgres(pgServer.env, 2);
  const sql = connect();
  const store = new PostgresStore(connect, 10_000);
  const redis = new Redis(redisServer.url);
  const keys = queueKeys("status");
  const queue = new ShardedQueue(redis, { keys: [keys] });
  const status = userStatusReader({
    indexed: (id) => queue.indexed(id),
    findUser: (id) => findUser(sql, id),
  });
  let consumer: Consumer | undefined;
  try {
    // A rule of this deployment's table that the API does not know: the database refuses the row.
    await sql`alter table users add constraint no_mallory check (name <> 'Mallory')`;

    // Crashes two consumers (MAX_CRASHES=2 here), so it is buried.
    const crasher = user("Crasher");
    await enqueueAll(queue, [crasher], 100);
    for (const crashed of ["crashed-1", "crashed-2"]) {
      await queue.register(crashed, 60_000);
      assert.equal((await queue.fetch({ consumerId: crashed, max: 10 })).items.length, 1);
      await redis.del(keys.heartbeatPrefix + crashed);
      await queue.recover(2);
    }
    assert.equal((await status(crasher.id))?.status, "dead");

    // Taken by a consumer that crashes once: back in the retry list, still queued.
    const survivor = user("Survivor");
    await enqueueAll(queue, [survivor], 100);
    await queue.register("crashed-3", 60_000);
    await queue.fetch({ consumerId: "crashed-3", max: 10 });
    assert.deepEqual(await status(survivor.id), { status: "queued", id: survivor.id });
    await redis.del(keys.heartbeatPrefix + "crashed-3");
    assert.deepEqual(await queue.recover(2), { recovered: 1, buried: 0, consumers: 1 });
    assert.equal(await redis.llen(keys.retry), 1);
    assert.deepEqual(await status(survivor.id), { status: "queued", id: survivor.id });

    const ada = user("Ada");
    const mallory = user("Mallory");
    await enqueueAll(queue, [ada, mallory], 100);
    // The course's command, without the index: consumed all the same.
    const raw = user("Raw");
    await redis.lpush(keys.queue, encodeEnvelope(raw), "{not json");
    assert.deepEqual(await status(ada.id), { status: "queued", id: ada.id });
    assert.equal(await status(raw.id), undefined, "no status for a raw push until stored");
    assert.equal(await status(uuidv7()), undefined);

    consumer = new Consumer({
      queue,
      waitForItems: () => new Promise((resolve) => setTimeout(resolve, 20)),
      store,
      batchSize: 100,
      heartbeatTtlMs: 5_000,
      recoveryIntervalMs: 60_000,
      maxCrashes: 2,
      blockTimeoutSeconds: 1,
      retryMaxDelayMs: 200,
      shutdownTimeoutMs: 5_000,
      newId: uuidv7,
    });
    void consumer.consume();
    await waitFor("every item to be handled", async () => {
      const depth = await depthOf(redis, queue.keys);
      return depth.queued + depth.retry + depth.processing === 0;
    }, { intervalMs: 20, timeoutMs: 30_000 });

    const stored = await status(ada.id);
    assert.equal(stored?.status, "stored");
    assert.equal(stored.status === "stored" && stored.name, "Ada");
    assert.equal((await status(survivor.id))?.status, "stored");
    assert.equal((await status(raw.id))?.status, "stored");

    const refused = await status(mallory.id);
    assert.ok(refused?.status === "dead", JSON.stringify(refused));
    assert.equal(refused.kind, "database_refused");
    assert.equal(refused.sqlstate, "23514");
    assert.match(refused.reason, /no_mallory/);
    assert.ok(!Number.isNaN(Date.parse(refused.dead_at)));

    const buried = await status(crasher.id);
    assert.ok(buried?.status === "dead");
    assert.equal(buried.kind, "consumer_crashed");
    assert.match(buried.reason, /crashed while holding it 2 times/);

    // The index holds exactly the dead accepted users; the counts, every letter by kind.
    assert.deepEqual((await redis.hkeys(keys.deadIds)).sort(), [crasher.id, mallory.id].sort());
    assert.equal(await redis.exists(keys.queuedIds), 0, "nobody is left queued");
    assert.deepEqual(await redis.hgetall(keys.deadCounts), {
      consumer_crashed: "1",
      database_refused: "1",
      invalid_item: "1",
    });
    assert.equal(await redis.llen(keys.dead), 3);
    assert.equal(await redis.hget(keys.stats, "stored"), "3");
  } finally {
    await consumer?.stop();
    redis.disconnect();
    await store.close();
    await sql.end();
  }
});

Deno.test("GET /users/<id> answers 503 with Retry-After and the store's code while PostgreSQL or Redis is stopped", async () => {
  await using redisServer = await startRedis();
  await using pgServer = await startPostgres();
  await migrate(pgServer.env);
  const sql = connectPostgres(pgServer.env, 2);
  // The API's own options: a command to a stopped Redis fails at once.
  const redis = new Redis(redisServer.url, apiRedisOptions(1_000));
  redis.on("error", () => {});
  const queue = new ShardedQueue(redis, { keys: [queueKeys("outage")] });
  const unexpected: unknown[] = [];
  // The listing answers the admin token only (docs/api.md, "Who can read what").
  const token = crypto.randomUUID();
  const app = createApp({
    accept: () => Promise.reject(new Error("this test posts nobody")),
    userStatus: userStatusReader({
      indexed: (id) => queue.indexed(id),
      findUser: (id) => findUser(sql, id),
    }),
    listUsers: (limit) => listUsers(sql, limit),
    admin: {
      token,
      deadLetters: new DeadLetters(redis, [queueKeys("outage")]),
      overview: () => Promise.reject(new Error("this test reads no overview")),
    },
    onUnexpectedError: (error) => unexpected.push(error),
  });
  const answer = async (path: string) => {
    const res = await app.request(path, { headers: { Authorization: `Bearer ${token}` } });
    const body = await res.json();
    return { status: res.status, retryAfter: res.headers.get("Retry-After"), code: body.code };
  };
  try {
    const stored = user("Stored");
    await insertUsers(sql, [stored]);
    const queued = user("Queued");
    await enqueueAll(queue, [queued], 100);
    assert.equal((await answer(`/users/${stored.id}`)).status, 200);

    await pgServer.server.stop("fast");
    const down = { status: 503, retryAfter: "1", code: "database_unavailable" };
    assert.deepEqual(await answer(`/users/${stored.id}`), down);
    assert.deepEqual(await answer("/users"), down);
    // The index answers alone for a queued user: no table read, no outage to report.
    assert.equal((await answer(`/users/${queued.id}`)).status, 200);

    await pgServer.server.start();
    assert.equal((await answer(`/users/${stored.id}`)).status, 200, "answers again once back");

    await redisServer.server.stop();
    assert.deepEqual(await answer(`/users/${stored.id}`), {
      status: 503,
      retryAfter: "1",
      code: "queue_unavailable",
    });
    assert.deepEqual(unexpected, [], "an outage is not a bug");
  } finally {
    redis.disconnect();
    await sql.end();
  }
});
