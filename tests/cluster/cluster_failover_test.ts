/**
 * A Redis Cluster master SIGKILLed under load until its replica is promoted, the API
 * and the consumers in cluster mode throughout. On loopback a replica is at most microseconds
 * behind its master, so a plain kill would lose nothing with or without WAIT and prove nothing;
 * the master's replica is made to fall behind first (frozen, its link cut:
 * `RedisCluster.killMaster`'s `replicaLagMs`), and the master goes on alone for a moment before
 * it dies, as it would across a slow or broken link. Meanwhile PostgreSQL is frozen, so the
 * consumers hold their batch and what the master accepts alone waits in Redis, as a backlog does
 * under load, instead of being stored at once:
 * - with REDIS_WAIT_REPLICAS=1 a 202 is given only once a replica holds the push, so no request
 *   sent while the master was alone gets a 202 for a user of its shards (asserted: the control
 *   that WAIT was in force), and nothing accepted is lost and nothing is stored twice (asserted).
 *   Those requests are answered 503: `unconfirmed` while the master runs alone,
 *   `queue_unavailable` once it is dead and until its replica serves its slots; such a user may
 *   be stored, once at most. Until the killed master is back as the promoted one's replica, that
 *   shard's pushes cannot be confirmed either. Each of those 503s must fall in the failover's
 *   window; outside it, none;
 * - without it, replication stays asynchronous and a 202 whose push had not reached the replica
 *   (and that no consumer had taken yet) is lost: the documented window. The scenario measures and
 *   prints it, fails as inconclusive when nothing was lost (the control: the checks must see the
 *   loss they guard against), and fails on any lost user other than one answered 202 into the
 *   master's shards while it was alone, on anything stored twice, and on anything stored that
 *   was refused other than with a 503 whose push may have run.
 * Then a planned failover (`CLUSTER FAILOVER` on the replica, which takes over once it has
 * caught up), with and without WAIT: nothing is lost either way, and once the cluster is whole
 * the API accepts pushes again, although the old master, still up as a replica, answers MOVED to
 * a client that has not yet learnt the new layout.
 * Then the deployment docs/scaling.md describes (3 masters and 3 replicas, QUEUE_SHARDS=3,
 * REDIS_WAIT_REPLICAS=1), and the same with QUEUE_SHARDS=6 (two shards on each master), with a
 * master SIGKILLed and left dead until the accounting is done: the promoted replica has no
 * replica of its own, so its shards can confirm nothing. The users answered 202 before the kill,
 * waiting there (PostgreSQL frozen meanwhile), are taken from the promoted master and stored
 * exactly once with the old one still dead; every push to those shards is refused with 503
 * `unconfirmed` within twice REDIS_WAIT_TIMEOUT_MS and a Redis tick each (none waits out
 * REDIS_TIMEOUT_MS into a `queue_unavailable`), and the other shards accept every push.
 * Beside the load, a client sends each of its users with an `Idempotency-Key` of its own and
 * retries every other answer than 202 with it, after Retry-After, giving a key up after
 * KEYED_GIVE_UP_MS: its tries are held to the same bounds and excuses as the load's, each key
 * that got a 202 (on a retry too) is stored exactly once under that id, only keys of the dead
 * master's shards are given up, each stored once at most and only under an id one of its 503s
 * named, and `GET /users/{id}` on every id a 503 named agrees with the table; a run where no key
 * given up was refused as unconfirmed on every try and stored under that id fails as
 * inconclusive.
 * Throughout, a master's fault explains only the answers that name an id of its shards
 * (`Fault.shards`), but while the cluster refuses every key, until its replica is promoted.
 * Each prints its accounting line (accepted, stored, lost, duplicated, unconfirmed…).
 *
 * @module
 */

import assert from "node:assert/strict";
import { shardOf } from "@users-pipeline/queue";
import type { RedisCluster } from "@users-pipeline/harness/redis_cluster";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { type Excuse, QUEUE_UNAVAILABLE, QUEUE_UNCONFIRMED } from "../support/answer_check.ts";
import { clusterScenario } from "../support/scenario.ts";
import { ANSWER_MARGIN_MS } from "../support/service_env.ts";
import type { Stage } from "../support/stage.ts";
import { type ClusterRedis, REDIS_TICK_MS } from "../support/topology.ts";
import type { LoadGenerator, Outcome } from "../support/fault_load.ts";
import { RetryingClient } from "../support/retrying_client.ts";
import {
  answerCounts,
  answerOf,
  batchesSummary,
  refusals,
  seconds,
} from "../support/summary_phrases.ts";

/** Accepted users wanted before the kill and again after the cluster is whole. */
const PHASE = 600;
/** How long the master goes on alone, its replica cut off, before it is killed. */
const LAG_MS = 1_000;
/**
 * How long the APIs' client may take to learn a new layout once the cluster is whole: a node's
 * slot map reaches it by a redirect or by its periodic refresh.
 */
const LEARN_MS = 5_000;
/** How long the load goes on with a master left dead, its shard's master without a replica. */
const LEFT_DEAD_MS = 10_000;
/** New users a second of the keyed client beside the left-dead scenario's load. */
const KEYED_RATE = 30;
/**
 * Its bulk twin: keyed batches of 10, 2 a second; each batch goes whole to its key's shard, a
 * third of them to the dead master's.
 */
const KEYED_BULK = { ratePerSecond: 2, batchSize: 10 };
/**
 * How long the keyed client tries one user before it gives it up: a few tries (Retry-After is
 * 1 s), and the scenario still ends while the old master stays dead, as its shards refuse until
 * then.
 */
const KEYED_GIVE_UP_MS = 5_000;

/**
 * The bulk client beside each failover's load: batches of 25 users, 4 a second, so that batches
 * meet the failover as the load's users do, and with several shards some span the failed master's.
 */
const BULK = { batchSize: 25, ratePerSecond: 4, concurrency: 4 };

const CASES = [
  { wait: 1, shards: 1 },
  { wait: 0, shards: 1 },
  { wait: 1, shards: 6 },
] as const;

for (const { wait, shards } of CASES) {
  const mode = wait > 0 ? `REDIS_WAIT_REPLICAS=${wait}` : "without WAIT";
  clusterScenario(
    `cluster, QUEUE_SHARDS=${shards}, ${mode}: a master SIGKILLed under load fails over ` +
      (wait > 0 ? "losing nothing accepted" : "and the loss window is measured"),
    { shards },
    async (stage) => {
      const { topology: { cluster }, pg } = stage.world;
      const env = { REDIS_WAIT_REPLICAS: String(wait) };
      const apis = [await stage.server(env), await stage.server(env)];
      await stage.consumer(env);
      await stage.consumer(env);
      const load = stage.load(apis, `failover-k${shards}-w${wait}`, { ratePerSecond: 500 });
      const bulk = stage.load(apis, `failover-k${shards}-w${wait}-bulk`, BULK);
      await accepted(load, PHASE);
      // Shard 0's master: with one shard, every push goes there.
      const master = await cluster.masterOf(stage.shards[0]!.queue);
      const onMaster = new Set<number>();
      for (const [i, shard] of stage.shards.entries()) {
        if ((await cluster.masterOf(shard.queue)) === master) onMaster.add(i);
      }
      const acceptedBefore = load.count("accepted");
      // The failover window, from the cut until the old master is back as the promoted one's
      // replica, and 5 s for the APIs' client to learn the new layout: a 503 queue_unavailable
      // while the shard has no master, and with WAIT a 503 unconfirmed while it has no replica
      // (docs/scaling.md, "Failover and `REDIS_WAIT_REPLICAS`": "Fewer confirmations in time give 503
      // `unconfirmed`"). Outside it, neither may occur.
      // Only the killed master's shards: the others go on answering 202 (docs/scaling.md,
      // "Failover and `REDIS_WAIT_REPLICAS`": "the other shards go on answering 202").
      const fault = stage.fault(`${master.name} SIGKILLed`, failoverExcuses(wait), {
        graceMs: LEARN_MS,
        shards: onMaster,
      });
      // Read before killMaster() drops the replicas' links, so that a push the master ran alone
      // just after the drop, answered before `cutAt` was read, is inside the loss window.
      const cutFrom = Date.now();
      // PostgreSQL frozen meanwhile: the consumers keep the batch in hand and take no more, so
      // what the master accepts alone stays in Redis (a backlog, the queue's normal state under
      // load) instead of being stored within milliseconds, as an idle pipeline would.
      pg.server.freeze();
      let failover;
      try {
        failover = await cluster.killMaster(master, { replicaLagMs: LAG_MS });
      } finally {
        pg.server.thaw();
      }
      const { promoted, ms: failoverMs, cutAt = 0, killedAt } = failover;
      const acceptedDuring = load.count("accepted") - acceptedBefore;
      // Back as the promoted node's replica, so that WAIT can be satisfied again.
      const restartedAt = Date.now();
      await cluster.restart(master);
      const rejoinMs = Date.now() - restartedAt;
      fault();
      await accepted(load, load.count("accepted") + PHASE);
      const [outcomes, batched] = await Promise.all([load.stop(), bulk.stop()]);
      const drainMs = await stage.drain();
      // Without WAIT, only a 202 the master gave alone may be lost (docs/scaling.md, "Failover and
      // `REDIS_WAIT_REPLICAS`": "without WAIT a failover can lose users answered 202 in its last
      // moments"); with it, none.
      const report = await stage.verify([...outcomes, ...batched], {
        label: `cluster failover K=${shards} ${mode}`,
        refusedMayBeStored: true,
        mayLose: wait === 0 ? { from: cutFrom, to: killedAt, shards: onMaster } : undefined,
        crashCountsMayRemain: true,
      });
      // Each batch's refused users settled by the id its item names, as a refused user's is.
      const settled = await stage.assertSettled(apis[0]!, batched);
      assert.ok(
        batched.some((o) => o.kind === "rejected"),
        "inconclusive: no user of a batch was refused across the failover",
      );
      await stage.stopAll();
      // The requests sent while the master was alone; those accepted into its shards are held
      // by no replica.
      const alone = outcomes.filter((o) => o.sentAt >= cutAt && o.sentAt < killedAt);
      const aloneAccepted = alone.filter((o) =>
        o.kind === "accepted" && onMaster.has(shardOf(o.id!, stage.shards.length))
      ).length;
      assert.ok(alone.length > 0, "inconclusive: no request was sent while the master was alone");
      if (wait > 0) {
        assert.equal(aloneAccepted, 0, "a push no replica held was answered 202 despite WAIT");
      } else {
        assert.equal(unconfirmedAnswers(outcomes), 0, "no WAIT, so nothing can be unconfirmed");
        // The control: the checks above must see the loss they exist to catch, as the course's
        // BRPOP consumer's control does (fault_consumer_test.ts). The master accepted users alone
        // into a backlog no consumer could take (PostgreSQL frozen), so some are gone.
        assert.ok(
          report.lost.length > 0,
          `inconclusive: no user was lost without WAIT (${aloneAccepted} accepted into the ` +
            `master's shards while it was alone)`,
        );
      }
      assert.equal(await roleOf(cluster, promoted.port), "master");
      const lostSample = report.lost.length > 0
        ? `; lost e.g. ${report.lost.slice(0, 3).join(", ")}`
        : "";
      console.log(
        `cluster failover K=${shards} ${mode}: ${master.name} (shards ${[...onMaster]}) cut ` +
          `off from its replica for ${seconds(LAG_MS)} (${alone.length} requests sent ` +
          `meanwhile, ${aloneAccepted} accepted into its shards), then SIGKILLed ` +
          `(${acceptedBefore} accepted before the cut); ` +
          `${promoted.name} promoted and the cluster whole ${seconds(failoverMs)} after the ` +
          `kill (${acceptedDuring} accepted from the cut until then); the old master back as ` +
          `its replica in ${seconds(rejoinMs)}; drained ${seconds(drainMs)} after the last ` +
          `answer; refusals: ${refusals(outcomes)}${lostSample}; ` +
          `${batchesSummary(batched, "batches")}, each refused one's id settled by ` +
          `GET /users/{id} (${settled.stored} stored, ${settled.never} never queued)`,
      );
    },
  );
}

for (const wait of [1, 0]) {
  const mode = wait > 0 ? `REDIS_WAIT_REPLICAS=${wait}` : "without WAIT";
  clusterScenario(
    `cluster, ${mode}: a planned failover (CLUSTER FAILOVER) under load loses nothing and ` +
      "pushes are accepted again once the cluster is whole",
    { shards: 1 },
    async (stage) => {
      const { cluster } = stage.world.topology;
      const env = { REDIS_WAIT_REPLICAS: String(wait) };
      const apis = [await stage.server(env), await stage.server(env)];
      await stage.consumer(env);
      await stage.consumer(env);
      const load = stage.load(apis, `handover-w${wait}`, { ratePerSecond: 500 });
      const bulk = stage.load(apis, `handover-w${wait}-bulk`, BULK);
      await accepted(load, PHASE);
      const master = await cluster.masterOf(stage.shards[0]!.queue);
      // The old master stays up, as a replica: a client that still sends it the shard's
      // commands is told MOVED, and must follow it. The window is the failover's, as above.
      const fault = stage.fault(`${master.name} handed over`, failoverExcuses(wait), {
        graceMs: LEARN_MS,
      });
      const { promoted, ms } = await cluster.handOver(master);
      fault();
      await accepted(load, load.count("accepted") + PHASE, 30_000);
      const [outcomes, batched] = await Promise.all([load.stop(), bulk.stop()]);
      const drainMs = await stage.drain();
      // The replica takes over only once it holds everything: nothing is lost, WAIT or not.
      const report = await stage.verify([...outcomes, ...batched], {
        label: `cluster handover K=1 ${mode}`,
        refusedMayBeStored: true,
        crashCountsMayRemain: true,
      });
      // Each batch's refused users settled by the id its item names, as a refused user's is.
      const settled = await stage.assertSettled(apis[0]!, batched);
      await stage.stopAll();
      console.log(
        `cluster handover K=1 ${mode}: ${promoted.name} took over from ${master.name} in ` +
          `${seconds(ms)}; ${report.accepted} accepted in all; drained ${seconds(drainMs)} ` +
          `after the last answer; refusals: ${refusals(outcomes)}; ` +
          `${batchesSummary(batched, "batches")} (refused ids settled: ${settled.stored} ` +
          `stored, ${settled.never} never queued)`,
      );
    },
  );
}

// The deployment of docs/scaling.md ("Redis Cluster": 3 masters and 3 replicas,
// QUEUE_SHARDS=3, REDIS_WAIT_REPLICAS=1) losing a master for good: the replica promoted in its
// place has no replica of its own, so no push to its shard can be confirmed until one joins it.
// And with twice as many shards as masters, where the promoted master serves two shards over one
// connection of each API.
for (const shards of [3, 6]) {
  clusterScenario(
    `cluster, QUEUE_SHARDS=${shards}, REDIS_WAIT_REPLICAS=1: a master SIGKILLed under load and ` +
      "left dead keeps every 202 it confirmed, and its shards' pushes are refused promptly as " +
      "unconfirmed",
    { shards },
    async (stage) => {
      const { topology: { cluster }, pg, redis } = stage.world;
      const env = { REDIS_WAIT_REPLICAS: "1" };
      const waitTimeoutMs = Number(stage.env(env).REDIS_WAIT_TIMEOUT_MS);
      const apis = [await stage.server(env), await stage.server(env)];
      await stage.consumer(env);
      await stage.consumer(env);
      const load = stage.load(apis, "left-dead", { ratePerSecond: 300, concurrency: 64 });
      const bulk = stage.load(apis, `left-dead-k${shards}-bulk`, BULK);
      const keyedClient = (
        prefix: string,
        options: { ratePerSecond: number; batchSize?: number },
      ) =>
        new RetryingClient({
          urls: apis.map((api) => api.url),
          prefix: `left-dead-k${shards}-${prefix}`,
          giveUpMs: KEYED_GIVE_UP_MS,
          ...options,
        }).start();
      const keyed = keyedClient("keyed", { ratePerSecond: KEYED_RATE });
      const keyedBulk = keyedClient("keyed-bulk", KEYED_BULK);
      await accepted(load, PHASE);
      const master = await cluster.masterOf(stage.shards[0]!.queue);
      const orphaned = new Set<number>();
      for (const [i, shard] of stage.shards.entries()) {
        if ((await cluster.masterOf(shard.queue)) === master) orphaned.add(i);
      }
      // docs/scaling.md: "`redis-cli --cluster create` gives the masters equal contiguous ranges, so K equal
      // to the number of masters puts one shard on each" (and K twice that, two).
      const masters = (await cluster.masters()).length;
      assert.equal(orphaned.size, shards / masters, "the killed master's share of the shards");
      const orphanedQueue = stage.shards[[...orphaned][0]!]!.queue;
      // Until the cluster is whole without it, and LEARN_MS for the APIs' client to learn the new
      // layout: 503 queue_unavailable while the shard has no master (docs/delivery.md, "Every answer is
      // prompt": 503 when Redis did not answer), unconfirmed once it has one without a replica.
      // Only its shards: "the other shards go on answering 202".
      const fault = stage.fault(`${master.name} SIGKILLed`, ["unavailable", "unconfirmed"], {
        graceMs: LEARN_MS,
        shards: orphaned,
      });
      // PostgreSQL frozen, so users answered 202 before the kill wait in the shard's list (a
      // backlog, as under load) and must be taken from the promoted master, which holds them as
      // WAIT confirmed them, while the old one stays dead.
      pg.server.freeze();
      let failover;
      let backlog = 0;
      try {
        await waitFor(`a backlog in ${orphanedQueue}`, async () => {
          backlog = await redis.llen(orphanedQueue);
          return backlog >= 100;
        }, { timeoutMs: 20_000, intervalMs: 50 });
        failover = await cluster.killMaster(master);
      } finally {
        pg.server.thaw();
      }
      fault();
      const deadFrom = Date.now() + LEARN_MS;
      // From then on the shard has a master without a replica: docs/scaling.md, "Failover and
      // `REDIS_WAIT_REPLICAS`": "every push to those shards gets 503 `unconfirmed`", and
      // nothing else.
      const leftDead = stage.fault(`${master.name} left dead`, ["unconfirmed"], {
        shards: orphaned,
      });
      await delay(LEARN_MS + LEFT_DEAD_MS);
      // The keyed client's last users are tried for up to KEYED_GIVE_UP_MS more, still inside it.
      const [single, batched, keyedUsers, keyedBatched] = await Promise.all([
        load.stop(),
        bulk.stop(),
        keyed.stop(),
        keyedBulk.stop(),
      ]);
      leftDead();
      // A batch's users are held as the load's: each by its own item, in its own shard.
      const outcomes = [...single, ...batched];
      const tries = [...keyed.answers, ...keyedBulk.answers];
      // The old master is still dead: the consumers drain the promoted one, and every 202 (those
      // of the backlog above included) must be stored exactly once.
      const drainMs = await stage.drain();
      // The keyed client's tries are held to the same bounds as the load's requests.
      const late = [...outcomes, ...tries].filter((o) => o.sentAt >= deadFrom);
      const inShard = (o: Outcome) =>
        o.id !== undefined && orphaned.has(shardOf(o.id, stage.shards.length));
      const lateOrphaned = late.filter(inShard);
      const lateOthers = late.filter((o) => o.id === undefined || !inShard(o));
      // docs/scaling.md, "Failover and `REDIS_WAIT_REPLICAS`": refused within twice REDIS_WAIT_TIMEOUT_MS
      // (the WAIT in flight when it arrived, then its own), each WAIT ending up to a Redis tick
      // late, plus ANSWER_MARGIN_MS for the API's and the client's event loops on a loaded machine.
      const boundMs = 2 * (waitTimeoutMs + REDIS_TICK_MS) + ANSWER_MARGIN_MS;
      const wholeAt = failover.killedAt + failover.ms;
      const lastUnavailable = Math.max(
        wholeAt,
        ...outcomes.filter((o) => o.code === QUEUE_UNAVAILABLE).map((o) => o.sentAt + o.ms),
      );
      // Printed before the checks, so that a failing run says what it saw too.
      console.log(
        `cluster failover K=${shards} REDIS_WAIT_REPLICAS=1, ${master.name} (shards ` +
          `${[...orphaned]}) left dead: ${backlog} users ` +
          `answered 202 waited in its first shard at the kill; ${failover.promoted.name} promoted and ` +
          `the cluster whole without it ${seconds(failover.ms)} after the kill (the last 503 ` +
          `queue_unavailable answered ${seconds(lastUnavailable - wholeAt)} after that); then ` +
          `${seconds(LEFT_DEAD_MS)} with it dead: ${lateOrphaned.length} pushes to its shards ` +
          `(${answerCounts(lateOrphaned)}; slowest ${
            Math.max(0, ...lateOrphaned.map((o) => o.ms))
          } ` +
          `ms, bound ${boundMs} ms), ${lateOthers.length} to the others ` +
          `(${answerCounts(lateOthers)}); ${outcomes.length} sent in all ` +
          `(${answerCounts(outcomes)}; ${batchesSummary(batched, "of them in batches")}); ` +
          `keyed clients: ${keyedUsers.length} keys and ${keyedBatched.length} users in keyed ` +
          `batches, ${tries.length} tries by user (${answerCounts(tries)}); slowest answer ` +
          `${slowest(outcomes)}, ` +
          `of a keyed try ${slowest(tries)}; drained ${seconds(drainMs)} after ` +
          `the last answer with the old master still dead`,
      );
      // What was stored first, so that a run that also answers late says what it stored.
      await settleLeftDeadKeys({ stage, keyed, label: "keyed client", orphaned });
      await settleLeftDeadKeys({ stage, keyed: keyedBulk, label: "keyed bulk client", orphaned });
      assert.ok(
        lateOrphaned.length > 0,
        "inconclusive: no push to the orphaned shard after the failover",
      );
      const wrong = lateOrphaned.filter((o) => o.status !== 503 || o.code !== QUEUE_UNCONFIRMED);
      const slow = lateOrphaned.filter((o) => o.ms > boundMs);
      assert.deepEqual(
        { wrong: sample(wrong), slow: sample(slow) },
        { wrong: [], slow: [] },
        `pushes to the orphaned shard must be refused as unconfirmed within ${boundMs} ms ` +
          `(${wrong.length} otherwise, ${slow.length} slower, of ${lateOrphaned.length})`,
      );
      assert.ok(
        lateOrphaned.some((o) => batched.includes(o)),
        "inconclusive: no user of a batch was pushed to the orphaned shard after the failover",
      );
      const refusedElsewhere = lateOthers.filter((o) => o.kind !== "accepted");
      assert.deepEqual(sample(refusedElsewhere), [], "the other shards accept every push");
      // Every keyed try's answer other than 202 falls in the failover's window or the one left
      // dead, with a code they explain, and in time, as the load's do in verify() below.
      stage.assertAnswers(tries);
      // Every refusal that named an id, the load's and the keyed client's, settled as
      // docs/delivery.md, "What each answer means for the client", tells a client to.
      const settled = await stage.assertSettled(apis[0]!, [...outcomes, ...tries]);
      await stage.verify(outcomes, {
        label: `cluster K=${shards} REDIS_WAIT_REPLICAS=1, master left dead`,
        refusedMayBeStored: true,
        crashCountsMayRemain: true,
        // The keyed client's rows, settled above: those of a 202 under its id, and at most one
        // for a key given up, under an id its 503s named (docs/delivery.md, "What each answer
        // means for the client": a 503 that names an id may have queued the user).
        injected: [...keyedUsers, ...keyedBatched].flatMap(({ name, id }) =>
          id === undefined ? [] : [{ name, id }]
        ),
        mayStore: [...keyedUsers, ...keyedBatched].filter((user) => user.gaveUp).map((user) =>
          user.name
        ),
      });
      console.log(
        `cluster K=${shards} left dead: each 503's id settled by GET /users/{id} ` +
          `(${settled.stored} stored, ${settled.never} never queued)`,
      );
      assert.ok(
        !master.server.process.running,
        "the old master stayed dead through the accounting",
      );
      await stage.stopAll();
      await cluster.restart(master);
    },
  );
}

/**
 * The keyed client's accounting once drained, the old master still dead: each key that got a
 * 202, on its first try or a retry, is stored exactly once under that id; a key given up is
 * stored at most once, and only under an id one of its 503s named (`settleKeyed`); and only
 * keys of the `orphaned` shards are given up: every 503 of a key given up named an id of theirs.
 * It fails as inconclusive unless some key was given up after every try of it was refused as
 * unconfirmed, and stored under the id they named: the keyed path met the dead master. A keyed
 * batch is one script call in its key's shard, "queued all or none" (docs/api.md), so its users
 * are given up together or none is: a user of it stored under an id a 202 named while the others
 * were refused would not settle.
 * docs/scaling.md, "Failover and `REDIS_WAIT_REPLICAS`": until a replica joins the promoted
 * master, "the shards refuse", and of a keyed client, "if it gives up, its user is usually stored
 * anyway, once, under that id"; docs/delivery.md, "What each answer means for the client": with a
 * key, "at most once per key".
 */
async function settleLeftDeadKeys(
  { stage, keyed, label, orphaned }: {
    stage: Stage<ClusterRedis>;
    keyed: RetryingClient;
    label: string;
    orphaned: ReadonlySet<number>;
  },
): Promise<void> {
  const rows = await stage.world.sql<{ id: string; name: string }[]>`
    select id::text, name from users`;
  const users = keyed.users;
  const given = users.filter((user) => user.gaveUp);
  const retried = users.filter((user) => user.id !== undefined && user.tries > 1);
  const byName = new Map<string, Outcome[]>();
  for (const answer of keyed.answers) {
    byName.set(answer.name, [...byName.get(answer.name) ?? [], answer]);
  }
  const mine = new Set(users.map((user) => user.name));
  const givenNames = new Set(given.map((user) => user.name));
  const givenStored = rows.filter((row) => givenNames.has(row.name)).length;
  const problems = keyed.settled(rows);
  console.log(
    `${label}: ${users.length - given.length} of ${users.length} users 202 ` +
      `(${retried.length} on a retry), ${given.length} given up after ` +
      `${seconds(KEYED_GIVE_UP_MS)} (${givenStored} of them stored); ` +
      `${keyed.answers.length} tries; ${rows.filter((row) => mine.has(row.name)).length} rows; ` +
      `${problems.length} users not settled`,
  );
  assert.deepEqual(
    problems.slice(0, 5),
    [],
    `${label}: ${problems.length} users not stored as their answers say`,
  );
  const outside = given.filter((user) => {
    const named = (byName.get(user.name) ?? []).filter((o) => o.id !== undefined);
    return named.length === 0 ||
      named.some((o) => !orphaned.has(shardOf(o.id!, stage.shards.length)));
  });
  assert.deepEqual(
    outside.slice(0, 5).map((user) => user.key),
    [],
    `${label}: ${outside.length} users given up outside the dead master's shards ${[...orphaned]}`,
  );
  // The control: the keyed path must have met the dead master as docs/scaling.md says a keyed
  // client does ("the same 503 `unconfirmed`, naming the same id, on every retry until a replica
  // joins; if it gives up, its user is usually stored anyway, once, under that id"), or the
  // checks above held nothing of what a keyed client sees while it stays dead.
  const storedAs = new Map(rows.map((row) => [row.name, row.id]));
  const met = given.filter((user) => {
    const tries = byName.get(user.name) ?? [];
    return tries.length > 1 &&
      tries.every((o) => o.code === QUEUE_UNCONFIRMED && o.id === storedAs.get(user.name));
  });
  assert.ok(given.length > 0, `inconclusive: the ${label} gave no user up`);
  assert.ok(
    met.length > 0,
    `inconclusive: none of the ${given.length} users the ${label} gave up was refused as ` +
      "unconfirmed on every try and stored under the id those 503s named",
  );
}

/** The slowest of `outcomes`, for a summary: `1034 ms (503 queue_unavailable)`. */
function slowest(outcomes: readonly Outcome[]): string {
  const [o] = [...outcomes].sort((a, b) => b.ms - a.ms);
  return o === undefined ? "none" : `${o.ms} ms (${answerOf(o)})`;
}

/** The first few of `outcomes`, for a failure message. */
function sample(outcomes: readonly Outcome[]): string[] {
  return outcomes.slice(0, 3).map((o) =>
    `${o.name}: ${o.status ?? "no answer"} ${o.code ?? ""} after ${o.ms} ms`
  );
}

/** Waits until `load` has `count` accepted answers. */
async function accepted(
  load: LoadGenerator,
  count: number,
  timeoutMs = 90_000,
): Promise<void> {
  await waitFor(
    () =>
      `${count} accepted answers (${load.count("accepted")} so far; refusals: ${
        refusals(load.outcomes)
      })`,
    () => load.count("accepted") >= count,
    { timeoutMs, intervalMs: 50 },
  );
}

/**
 * The answers a failover explains: a 503 queue_unavailable while the shard has no master (or its
 * client has not learnt the new one), and with WAIT a 503 unconfirmed while it has no replica.
 */
function failoverExcuses(wait: number): Excuse[] {
  return wait > 0 ? ["unavailable", "unconfirmed"] : ["unavailable"];
}

/** How many of `outcomes` are the API's 503 for a push WAIT did not confirm. */
function unconfirmedAnswers(outcomes: readonly Outcome[]): number {
  return outcomes.filter((o) => o.status === 503 && o.code === QUEUE_UNCONFIRMED).length;
}

/** The role of the node on `port` as the cluster sees it now. */
async function roleOf(cluster: RedisCluster, port: number): Promise<string | undefined> {
  return (await cluster.view()).find((node) => node.port === port)?.role;
}
