/**
 * The pipeline on a real Redis Cluster, end to end: users posted through the API in
 * cluster mode (REDIS_CLUSTER_NODES) with one shard and with six, each stored exactly once under
 * the id its 202 gave; with six, the shards sit on all three masters and every one of them carries
 * and drains its part. Then a consumer SIGKILLed with a batch in hand: its items are recovered by
 * the other consumer, none lost, none stored twice. See `stage.ts` for what every scenario
 * is held to; each prints its accounting line. And `POST /users/batch` with REDIS_WAIT_REPLICAS=1:
 * a batch, and keyed batches each in its key's one slot, replayed with their ids, stored once.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { TaskProcess } from "@users-pipeline/harness/processes";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { clusterScenario } from "../support/scenario.ts";
import type { Stage } from "../support/stage.ts";
import type { ClusterRedis } from "../support/topology.ts";
import { seconds } from "../support/summary_phrases.ts";
import { numberField, serviceEvents } from "../support/service_events.ts";
import { RetryingClient, settleKeyed } from "../support/retrying_client.ts";
import { shardOf } from "@users-pipeline/queue";

/** Users per end-to-end scenario: enough for every shard of six to see a few hundred. */
const USERS = 3_000;
/** BATCH_SIZE of the consumer-kill scenarios' consumers. */
const BATCH = 200;

for (const shards of [1, 6]) {
  clusterScenario(
    `cluster, QUEUE_SHARDS=${shards}: every user posted through the API is stored exactly once`,
    { shards },
    async (stage) => {
      const { topology: { cluster }, redis } = stage.world;
      const masters = await shardMasters(stage);
      if (shards === 6) {
        assert.equal(
          new Set(masters).size,
          3,
          `the 6 shards sit on all 3 masters: ${masters.join(", ")}`,
        );
      }
      const apis = [await stage.server(), await stage.server()];
      await stage.consumer();
      await stage.consumer();
      const load = stage.load(apis, `e2e-k${shards}`, { limit: USERS, ratePerSecond: 1_500 });
      const outcomes = await load.finished();
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes, {
        label: `cluster K=${shards}`,
        refusedMayBeStored: true,
      });
      assert.equal(report.accepted, USERS, "with no fault every request is accepted");
      // Each shard's acknowledgements count what it stored: every shard carried users.
      const perShard = await Promise.all(
        stage.shards.map(async (shard) => Number(await redis.hget(shard.stats, "stored") ?? 0)),
      );
      assert.equal(perShard.reduce((a, b) => a + b, 0), USERS, `stored per shard: ${perShard}`);
      if (shards > 1) {
        assert.ok(perShard.every((n) => n > 0), `every shard stored users: ${perShard}`);
      }
      await stage.stopAll();
      console.log(
        `cluster K=${shards}: stored per shard ${perShard.join("/")} on ` +
          `masters ${[...new Set(masters)].map((port) => cluster.node(port).name).join(", ")}; ` +
          `drained ${seconds(drainMs)} after the last answer`,
      );
    },
  );
}

clusterScenario(
  "cluster, QUEUE_SHARDS=6: an Idempotency-Key's record sits in its user's shard, and a retried " +
    "key is queued once",
  { shards: 6 },
  async (stage) => {
    const { redis, sql } = stage.world;
    const apis = [await stage.server(), await stage.server()];
    await stage.consumer();
    await stage.consumer();
    const client = new RetryingClient({
      urls: apis.map((api) => api.url),
      prefix: "cluster-keyed",
      ratePerSecond: 300,
    }).start();
    await delay(3_000);
    const users = await client.stop();
    // Every key again, as a client that lost each answer would send it: the same id, a replay.
    const replays = await Promise.all(users.map(async (user, i) => {
      const res = await fetch(`${apis[i % 2]!.url}/users`, {
        method: "POST",
        headers: { "Idempotency-Key": user.key },
        body: JSON.stringify({ name: user.name }),
      });
      const body = await res.json();
      return res.status === 202 && body.id === user.id &&
        res.headers.get("Idempotent-Replayed") === "true";
    }));
    assert.equal(replays.filter((ok) => !ok).length, 0, "every replay answers the key's id");
    const drainMs = await stage.drain();
    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    assert.deepEqual(settleKeyed(users, rows), [], "each key stored exactly once under its id");
    // Each record is in the shard of its user's id (one slot: the push and the record are one
    // script call), and the keys spread over every shard.
    const shardsUsed = new Set<number>();
    for (const user of users) {
      const shard = shardOf(user.id!, stage.shards.length);
      shardsUsed.add(shard);
      assert.equal(await redis.exists(stage.shards[shard]!.idempotencyPrefix + user.key), 1);
    }
    assert.equal(shardsUsed.size, 6, `keys in every shard: ${[...shardsUsed]}`);
    await stage.stopAll();
    console.log(
      `cluster K=6 keyed: ${users.length} keys, ${client.tries} tries, each stored once and ` +
        `replayed with its id; records in all 6 shards; drained ${seconds(drainMs)}`,
    );
  },
);

clusterScenario(
  "cluster, QUEUE_SHARDS=6, REDIS_WAIT_REPLICAS=1: a batch is stored by id, and a keyed batch is " +
    "one shard's, replayed with the same ids and stored once",
  { shards: 6 },
  async (stage) => {
    const { redis, sql } = stage.world;
    const env = { REDIS_WAIT_REPLICAS: "1" };
    const apis = [await stage.server(env), await stage.server(env)];
    await stage.consumer();
    const post = async (url: string, names: readonly string[], key?: string) => {
      const res = await fetch(`${url}/users/batch`, {
        method: "POST",
        headers: key === undefined ? {} : { "Idempotency-Key": key },
        body: JSON.stringify(names.map((name) => ({ name }))),
      });
      return { res, body: await res.json() };
    };
    const idsOf = (body: { items: { id: string }[] }) => body.items.map((item) => item.id);
    const plain = Array.from({ length: 500 }, (_, i) => `cluster batch ${i}`);
    const first = await post(apis[0]!.url, plain);
    assert.equal(first.res.status, 202, JSON.stringify(first.body));
    const expected = new Map(idsOf(first.body).map((id, i) => [id, plain[i]!]));
    // Keyed batches, each retried with its key until a 202 (docs/api.md, "Retrying without
    // duplicates: Idempotency-Key": "retries every answer other than 202"), then sent again as a
    // client that lost the answer would: the same ids, a replay.
    const keys = Array.from({ length: 24 }, (_, i) => `cluster-batch-${i}-${crypto.randomUUID()}`);
    const shardsUsed = new Set<number>();
    for (const [i, key] of keys.entries()) {
      const names = Array.from({ length: 40 }, (_, j) => `keyed ${i}-${j}`);
      let answer = await post(apis[i % 2]!.url, names, key);
      for (let tries = 1; answer.res.status !== 202 && tries < 20; tries++) {
        assert.equal(answer.res.status, 503, JSON.stringify(answer.body));
        await delay(200);
        answer = await post(apis[i % 2]!.url, names, key);
      }
      assert.equal(answer.res.status, 202, JSON.stringify(answer.body));
      const ids = idsOf(answer.body);
      const again = await post(apis[(i + 1) % 2]!.url, names, key);
      assert.equal(again.res.status, 202, JSON.stringify(again.body));
      assert.deepEqual(idsOf(again.body), ids, key);
      assert.equal(again.res.headers.get("Idempotent-Replayed"), "true");
      // One shard, hence one slot: the record and every user pushed in one script call.
      const shard = shardOf(ids[0]!, stage.shards.length);
      assert.ok(ids.every((id) => shardOf(id, stage.shards.length) === shard), key);
      assert.equal(await redis.exists(stage.shards[shard]!.idempotencyPrefix + key), 1);
      shardsUsed.add(shard);
      ids.forEach((id, j) => expected.set(id, names[j]!));
    }
    assert.ok(shardsUsed.size > 1, `keyed batches in several shards: ${[...shardsUsed]}`);
    const drainMs = await stage.drain();
    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    assert.equal(rows.length, expected.size, "each user stored once");
    assert.deepEqual(
      rows.filter((row) => expected.get(row.id) !== row.name),
      [],
      "every row under the id its 202 gave",
    );
    await stage.stopAll();
    console.log(
      `cluster K=6 WAIT=1 batches: 500 users in one batch and ${keys.length} keyed batches of ` +
        `40 in ${shardsUsed.size} shards, each replayed with its ids and stored once; drained ` +
        `${seconds(drainMs)}`,
    );
  },
);

for (const shards of [1, 6]) {
  clusterScenario(
    `cluster, QUEUE_SHARDS=${shards}: a consumer SIGKILLed with a batch in hand loses nothing`,
    { shards },
    async (stage) => {
      let consumers: { victim: TaskProcess; survivor: TaskProcess } | undefined;
      const { redis, sql } = stage.world;
      // A heartbeat that outlives the victim long enough to count what it held before recovery.
      const env = { BATCH_SIZE: String(BATCH), HEARTBEAT_TTL_MS: "3000" };
      const api = await stage.server();
      const load = stage.load([api], `consumer-kill-k${shards}`, {
        limit: USERS,
        ratePerSecond: 1_000,
      });
      // A backlog first, so that the batch the victim takes is a full one.
      await waitFor("a backlog to build", () => load.count("accepted") >= USERS / 2, {
        timeoutMs: 60_000,
      });
      // Table users locked against inserts: each consumer takes a batch (and the next, fetched
      // during the insert) and its insert waits (retried, the batch still in hand, when
      // STATEMENT_TIMEOUT_MS cuts it short), however busy the machine is. Their start
      // (migration check, PING, select 1) does not touch the table.
      let unlock = () => {};
      const unlocked = new Promise<void>((resolve) => unlock = resolve);
      let locked = () => {};
      const lockTaken = new Promise<void>((resolve) => locked = resolve);
      const lock = sql.begin(async (tx) => {
        await tx`lock table users in share mode`;
        locked();
        await unlocked;
      });
      let held = 0;
      try {
        await Promise.race([lockTaken, lock]);
        const [victim, survivor] = await Promise.all([
          stage.consumer(env, { registeredOnly: true }),
          stage.consumer(env, { registeredOnly: true }),
        ]);
        await waitFor(() => `${victim.name} to hold a batch`, async () => {
          return (await stage.held(victim)) > 0;
        }, { timeoutMs: 30_000 });
        stage.kill(victim);
        // What it held at its death, read once whatever it sent before has landed, and long
        // before its heartbeat expires.
        await delay(200);
        held = await stage.held(victim);
        await victim.status;
        consumers = { victim, survivor };
      } finally {
        unlock();
        await lock;
      }
      const { victim, survivor } = consumers!;
      assert.ok(held > 0, "inconclusive: the victim held nothing when it died");
      const keys = stage.processingKeys(victim);
      const recoveryMs = await waitFor(
        `${victim.name}'s batch to be recovered`,
        async () => (await Promise.all(keys.map((key) => redis.exists(key)))).every((n) => n === 0),
        { timeoutMs: 60_000, intervalMs: 50 },
      );
      const outcomes = await load.finished();
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes, {
        label: `cluster K=${shards} consumer SIGKILL`,
        refusedMayBeStored: true,
      });
      assert.equal(report.accepted, USERS, "with no Redis fault every request is accepted");
      const recovered = serviceEvents(survivor.output, "recovered")
        .reduce((sum, event) => sum + numberField(event, "items"), 0);
      assert.equal(recovered, held, "the survivor recovered exactly what the victim held");
      await stage.stopAll();
      console.log(
        `cluster K=${shards} consumer SIGKILL: ${held} items in the victim's hands (batches ` +
          `of ${BATCH}: the next is taken while one is inserted), recovered by ` +
          `${survivor.name} ${seconds(recoveryMs)} after the kill; drained ` +
          `${seconds(drainMs)} after the last answer`,
      );
    },
  );
}

/** The port of the master serving each shard now, shard 0 first. */
async function shardMasters(stage: Stage<ClusterRedis>): Promise<number[]> {
  const masters = [];
  for (const shard of stage.shards) {
    masters.push((await stage.world.topology.cluster.masterOf(shard.queue)).port);
  }
  return masters;
}
