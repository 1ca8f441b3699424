/**
 * Fault scenarios of Redis (issue #3): killed with SIGKILL and restarted from
 * its AOF, frozen for 10 s, a reply lost after its command ran, and full at
 * its maxmemory. After each, the consumers that lived through it must drain
 * the queue themselves: no fresh consumer is started to hide one stuck in
 * its reconnect. See `stage.ts` for what every scenario is held to.
 *
 * @module
 */

import assert from "node:assert/strict";
import { v7 as uuidv7 } from "uuid";
import { encodeEnvelope, ShardedQueue } from "@users-pipeline/queue";
import { enqueueAll } from "@users-pipeline/harness/queue_fill";
import type { TaskProcess } from "@users-pipeline/harness/processes";
import { projectEnv } from "@users-pipeline/harness/repo";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { QUEUE_UNAVAILABLE } from "../support/answer_check.ts";
import type { LoadGenerator, Outcome } from "../support/fault_load.ts";
import { scenario } from "../support/scenario.ts";
import {
  assertCleanExits,
  drainAndVerify,
  envelopes,
  twoInsertingOneIdle,
} from "../support/scenario_setups.ts";
import { ANSWER_MARGIN_MS, FAST_ENV } from "../support/service_env.ts";
import type { Api, Stage } from "../support/stage.ts";
import { pushMayHaveRun } from "../support/stage_verify.ts";
import type { StandaloneRedis } from "../support/topology.ts";
import {
  answers,
  batchesSummary,
  describeExits,
  keyedSummary,
  refusals,
  seconds,
  verdict,
} from "../support/summary_phrases.ts";

const DRAIN_MS = Number(projectEnv().SHUTDOWN_DRAIN_MS);
/**
 * The bulk client beside each outage's load: batches of 25 users, 8 a second (200 users/s), so
 * the 2-core machine holds it beside the single-user load; and its keyed twin, 20 a batch.
 */
const BULK = { batchSize: 25, ratePerSecond: 8, concurrency: 4 };
const KEYED_BULK = { batchSize: 20, ratePerSecond: 5 };
import { hasEvent, numberField, serviceEvents } from "../support/service_events.ts";

scenario(
  "Redis SIGKILLed and restarted from its AOF mid-run: the same consumer resumes and nothing is lost",
  async (stage) => {
    const { redis, topology: redisServer } = stage.world;
    const api = await stage.server();
    // The load starts before the consumer, so a backlog sits in Redis when it dies whether or not
    // one consumer in single mode turns out slower than the API on this machine.
    const load = stage.load([api], "redis-kill", { ratePerSecond: 2_000 });
    const keyed = stage.retrying([api], "redis-kill-keyed");
    const bulk = stage.load([api], "redis-kill-bulk", BULK);
    const keyedBulk = stage.retrying([api], "redis-kill-keyed-bulk", KEYED_BULK);
    await delay(2_000);
    const consumer = await stage.consumer({ CONSUMER_MODE: "single" });
    await delay(1_000);
    // Spares, SIGTERMed while Redis is down: they must still exit 0. The spare consumer serves a
    // queue of its own, so it takes none of the backlog the scenario needs at the kill.
    const spareApi = await stage.server();
    const spareConsumer = await stage.consumer({
      CONSUMER_MODE: "single",
      SHUTDOWN_TIMEOUT_MS: "300",
      QUEUE_NAME: `${stage.keys.queue}-spare`,
    });
    // However fast the consumer turns out to be against the API on this machine, kill Redis once a
    // backlog is there.
    let backlog = 0;
    await waitFor("a backlog in Redis", async () => {
      backlog = await redis.llen(stage.keys.queue);
      return backlog >= 100;
    }, { timeoutMs: 10_000, intervalMs: 50 }).catch(() => {});
    const acceptedBefore = load.count("accepted");
    const down = stage.fault("Redis down", ["unavailable"]);
    redisServer.server.kill("SIGKILL");
    const killedAt = Date.now();
    await redisServer.server.exited;
    stage.signal(spareApi.process, "SIGTERM");
    stage.signal(spareConsumer, "SIGTERM");
    const [spares] = await Promise.all([
      Promise.all(
        [spareApi.process, spareConsumer].map((p) =>
          // The API first drains for SHUTDOWN_DRAIN_MS; then it closes its listener and its clients
          // (REDIS_TIMEOUT_MS at most), stays 1 s with the port closed and exits: 8 s more are ample.
          Promise.race([p.status, delay(DRAIN_MS + 8_000).then(() => undefined)])
        ),
      ),
      delay(1_500),
    ]);
    await redisServer.server.start();
    const restartedAt = Date.now();
    assert.deepEqual(
      spares.map((status) => status?.code),
      [0, 0],
      `an API and a consumer SIGTERMed while Redis is down exit 0\n${stage.tails()}`,
    );
    // Everything acknowledged before the kill was in the OS's page cache: the
    // AOF reload holds the backlog that was there, less what the consumer took since.
    const reloaded = await redis.llen(stage.keys.queue);
    const apiBackMs = await acceptingAgain(load, restartedAt);
    down();
    await delay(1_000);
    const { outcomes, drainMs, report } = await stage.settle([load, bulk], {
      keyed: [keyed, keyedBulk],
    });
    const during = outcomes.filter((o) => o.sentAt >= killedAt && o.sentAt < restartedAt);
    assert.ok(backlog > 0, "inconclusive: nothing was queued when Redis died");
    assert.ok(
      during.some((o) => o.status === 503),
      "inconclusive: no request was answered while Redis was down",
    );
    assert.ok(
      bulk.outcomes.some((o) => o.status === 503 && o.sentAt >= killedAt && o.sentAt < restartedAt),
      "inconclusive: no batch was answered while Redis was down",
    );
    const settled = await assertNamedAndSettled(stage, api, outcomes);
    const outage = redisOutage(consumer, stage);
    await stage.stopAll();
    stage.summary(
      `Redis SIGKILL: ${answers(report)} (${acceptedBefore} before the kill, backlog ${backlog} ` +
        `in Redis at the kill, ${reloaded} queued after the AOF reload), ` +
        `${during.filter((o) => o.status === 503).length} × 503 while down, API accepting ` +
        `${seconds(apiBackMs)} after the restart, the same consumer saw the outage end after ` +
        `${seconds(outage.ms)} and drained the rest in ${seconds(drainMs)}, ${verdict(report)}; ` +
        `an API and a consumer SIGTERMed while it was down exited 0; ${keyedSummary(keyed)}; ` +
        `${batchesSummary(bulk.outcomes, "batches")}, ${
          batchesSummary(keyedBulk.answers, "keyed batches' tries")
        }; each 503's id settled by GET /users/{id} (${settled.stored} stored, ${settled.never} ` +
        `never queued)`,
    );
  },
);

scenario(
  "Redis frozen for 10 s: every answer within REDIS_TIMEOUT_MS + 100 ms, then the same consumers resume",
  async (stage) => {
    const redisServer = stage.world.topology;
    const api = await stage.server();
    const consumers = [await stage.consumer(), await stage.consumer()];
    const load = stage.load([api], "redis-freeze", { ratePerSecond: 1_000 });
    const keyed = stage.retrying([api], "redis-freeze-keyed");
    const bulk = stage.load([api], "redis-freeze-bulk", BULK);
    const keyedBulk = stage.retrying([api], "redis-freeze-keyed-bulk", KEYED_BULK);
    await delay(1_500);
    const frozen = stage.fault("Redis frozen", ["unavailable"]);
    redisServer.server.freeze();
    const frozenAt = Date.now();
    let thawedAt = 0;
    let readyz: { status: number; reason: string; ms: number };
    try {
      await delay(2_000);
      // Not ready while Redis does not answer its PING: Traefik would stop routing here.
      const askedAt = Date.now();
      const res = await fetch(`${api.url}/readyz`);
      readyz = { status: res.status, reason: (await res.json()).reason, ms: Date.now() - askedAt };
      await delay(8_000);
    } finally {
      redisServer.server.thaw();
      thawedAt = Date.now();
    }
    const apiBackMs = await acceptingAgain(load, thawedAt);
    frozen();
    await delay(1_500);
    const [single, batched] = await Promise.all([
      load.stop(),
      bulk.stop(),
      keyed.stop(),
      keyedBulk.stop(),
    ]);
    const outcomes = [...single, ...batched];
    // A push in flight when SIGSTOP landed may have run just before it, its
    // reply then read only after SIGCONT: the API had answered 503 long
    // before. Such a user may be stored (once); nothing else answered 503 may,
    // since a push Redis runs after its deadline does nothing.
    const straddling = outcomes.filter((o) =>
      o.kind === "rejected" && o.code === QUEUE_UNAVAILABLE &&
      o.sentAt <= frozenAt && o.sentAt + o.ms >= frozenAt
    ).map((o) => o.name);
    const drainMs = await stage.drain();
    const report = await stage.verify(outcomes, {
      mayStore: straddling,
      keyed: [keyed, keyedBulk],
    });
    const settled = await assertNamedAndSettled(stage, api, outcomes);
    // Requests sent well inside the freeze: none could be queued, each must
    // be a prompt 503 with Retry-After.
    const inside = outcomes.filter((o) =>
      o.sentAt >= frozenAt + 100 && o.sentAt < thawedAt - 1_000
    );
    assert.ok(inside.length > 0, "inconclusive: no request was sent during the freeze");
    const batchedInside = new Set(batched).intersection(new Set(inside));
    assert.ok(batchedInside.size > 0, "inconclusive: no batch was sent during the freeze");
    const bad = inside.filter((o) => o.status !== 503 || o.retryAfter === null);
    assert.deepEqual(bad.slice(0, 5), [], `${bad.length} requests during the freeze not a 503`);
    // Prompt: verify() held every answer to REDIS_TIMEOUT_MS + ANSWER_MARGIN_MS, as the client
    // measures it, whatever the Redis client does with the commands it holds.
    const promptMs = Number(FAST_ENV.REDIS_TIMEOUT_MS) + ANSWER_MARGIN_MS;
    const slowest = Math.max(...outcomes.map((o) => o.ms));
    assert.equal(readyz.status, 503);
    assert.match(readyz.reason, /^redis: /);
    const fenced = consumers.flatMap((c) => serviceEvents(c.output, "consumer_fenced")).length;
    await stage.stopAll();
    stage.summary(
      `Redis SIGSTOP ${seconds(thawedAt - frozenAt)}: ${answers(report)}, ${inside.length} × 503 ` +
        `with Retry-After well inside the freeze, slowest answer ${slowest} ms (bound ${promptMs} ms), ` +
        `API accepting ` +
        `${seconds(apiBackMs)} after SIGCONT, ${straddling.length} × 503 in flight at SIGSTOP ` +
        `(${report.mayStoreStored} stored), each 503's id settled by GET /users/{id} ` +
        `(${settled.stored} stored, ${settled.never} never queued), /readyz 503 "${readyz.reason}" in ${readyz.ms} ms ` +
        `while frozen, the same 2 consumers drained (fenced and ` +
        `re-registered ${fenced}×), ${verdict(report)}, drained in ${seconds(drainMs)}; ` +
        `${keyedSummary(keyed)}; ${batchesSummary(batched, "batches")}, ` +
        batchesSummary(keyedBulk.answers, "keyed batches' tries"),
    );
  },
);

scenario(
  "a Redis reply lost after the command ran (fetch or ack sent again) loses nothing",
  async (stage) => {
    // A command that times out client-side still runs once Redis resumes
    // (a stall longer than the consumer's command timeout), and a kill -9
    // between the AOF write and the reply loses the reply alone. The consumer
    // then sends the same fetch or ack again. Replayed here at the protocol
    // level, where the timing is exact.
    const { redis } = stage.world;
    const queue = new ShardedQueue(redis, { keys: [stage.keys] });
    const users = envelopes(10, "lost-reply");
    await enqueueAll(queue, users, 1_000);
    const id = uuidv7();
    await queue.register(id, 60_000);
    const lost = await queue.fetch({ consumerId: id, max: 4 }); // its reply never reached the consumer
    const retried = await queue.fetch({ consumerId: id, max: 4 });
    assert.ok(lost && retried);
    // The consumer stores what the retried fetch returned, then acknowledges it.
    const handled = new Set(retried.items);
    const poison = {
      payload: "x",
      reason: "test",
      kind: "invalid_item",
      dead_at: new Date().toISOString(),
    } as const;
    await retried.ack({ deadLetters: [poison] });
    await retried.ack({ deadLetters: [poison] }); // the ack, sent again
    const remaining = [
      ...(await redis.lrange(stage.keys.queue, 0, -1)),
      ...(await redis.lrange(stage.keys.processingPrefix + id, 0, -1)),
    ];
    const dropped = lost.items.filter((item) => !handled.has(item) && !remaining.includes(item));
    assert.deepEqual(dropped, [], "items taken by the lost fetch were acknowledged unstored");
    const dead = await redis.llen(stage.keys.dead);
    assert.equal(dead, 1, "a replayed ack buries its letters once");
    await queue.handBack(id);
    stage.summary(
      `lost Redis reply: fetch sent twice then acked, ack sent twice: dropped ` +
        `${dropped.length} of ${lost.items.length} items, dead letters ${dead} (1 expected)`,
    );
  },
);

scenario(
  "Redis at its maxmemory: the API refuses with 503 and the consumer still drains everything",
  async (stage) => {
    const { redis } = stage.world;
    const backlog = envelopes(20_000, "oom-backlog");
    for (let i = 0; i < backlog.length; i += 1_000) {
      await redis.lpush(stage.keys.queue, ...backlog.slice(i, i + 1_000).map(encodeEnvelope));
    }
    const api = await stage.server();
    const before = await stage.load([api], "oom-before", { limit: 10, concurrency: 1 }).finished();
    // Hardly any room left: Redis soon refuses every write (noeviction) but
    // the consumer's scripts, which are `allow-oom`.
    const limit = (await usedMemory(stage)) + 64 * 1024;
    await redis.config("SET", "maxmemory", String(limit));
    const full = stage.fault("Redis at its maxmemory", ["unavailable"]);
    const load = stage.load([api], "oom", { limit: 3_000, concurrency: 8 });
    const outcomes = await load.finished();
    const refused = outcomes.filter((o) => o.status === 503);
    assert.ok(
      refused.length > 0 && refused.every((o) => o.code === QUEUE_UNAVAILABLE),
      `the API refuses with 503 "${QUEUE_UNAVAILABLE}" once Redis is full: ${refusals(outcomes)}`,
    );
    // Redis itself says why: its OOM error, to this client too. Memory hovers at the bound (a
    // hash table of the status index that finishes rehashing frees a little), so one small write
    // may still fit: push until refused.
    await assert.rejects(async () => {
      for (let i = 0; i < 1_000; i++) {
        await redis.lpush(`${stage.keys.queue}:probe`, "x".repeat(1_024));
      }
    }, { name: "ReplyError", message: /^OOM / });
    await redis.del(`${stage.keys.queue}:probe`);
    const acceptedWhileFull = outcomes.filter((o) => o.kind === "accepted").length;
    await stage.consumer();
    const drainMs = await stage.drain();
    full();
    // Draining freed the memory: the API accepts again.
    const after = await stage.load([api], "oom-after", { limit: 20, concurrency: 1 }).finished();
    await stage.drain();
    const report = await stage.verify([...before, ...outcomes, ...after], {
      injected: backlog.map(({ id, name }) => ({ id, name })),
    });
    assert.equal(before.filter((o) => o.kind === "accepted").length, 10, "accepting before");
    assert.equal(after.filter((o) => o.kind === "accepted").length, 20, "accepting again");
    await stage.stopAll();
    stage.summary(
      `Redis at maxmemory (${Math.round(limit / 1024)} KiB, noeviction, OOM to writes) with a ` +
        `backlog of ${backlog.length}: the API accepted 10 of 10 before, ${acceptedWhileFull} ` +
        `until full, then ${refused.length} × 503 "${QUEUE_UNAVAILABLE}"; the consumer drained ` +
        `all ${backlog.length + 10 + acceptedWhileFull} in ${seconds(drainMs)}, then the API ` +
        `accepted 20 of 20; ${verdict(report)}`,
    );
  },
  { ownRedis: true },
);

scenario(
  "consumers SIGTERMed while Redis is frozen exit 0 within compose's 30 s and lose nothing",
  async (stage) => {
    const redisServer = stage.world.topology;
    // Two hold a batch, their inserts waiting on the test's lock on the table; then Redis
    // freezes and the lock goes: their inserts commit and their acknowledgements wait on the
    // frozen Redis.
    const setUp = await twoInsertingOneIdle(stage, "sigterm-redis-frozen");
    try {
      redisServer.server.freeze();
    } finally {
      await setUp.unlock();
    }
    const { consumers, users, held, shutdownMs } = setUp;
    let exits: Awaited<ReturnType<Stage["sigterm"]>>;
    try {
      await delay(500);
      exits = await stage.sigterm(consumers);
    } finally {
      redisServer.server.thaw();
    }
    assertCleanExits(stage, exits);
    for (const consumer of consumers.filter((_, i) => held[i]! > 0)) {
      assert.ok(
        hasEvent(consumer.output, "shutdown_deadline"),
        `${consumer.name} gave its acknowledgement up at the deadline\n${stage.tails()}`,
      );
    }
    const { drainMs, report } = await drainAndVerify(stage, users);
    await stage.stopAll();
    stage.summary(
      `SIGTERM while Redis is frozen (SHUTDOWN_TIMEOUT_MS ${shutdownMs}): ${
        describeExits(exits, held)
      }; ${users.length} stored, ${verdict(report)}, drained ${seconds(drainMs)} after a ` +
        `fresh consumer started`,
    );
  },
);

/**
 * Settles every refusal that may have queued its user by the id it names (`Stage.assertSettled`),
 * after checking that each names one: docs/delivery.md, "What each answer means for the client":
 * a 503 `queue_unavailable`, alone or as a batch's item, is settled by `GET /users/<id>` "with the
 * id in the answer".
 */
async function assertNamedAndSettled(
  stage: Stage,
  api: Api,
  outcomes: readonly Outcome[],
): Promise<{ stored: number; never: number }> {
  const unnamed = outcomes.filter((o) => pushMayHaveRun(o) && o.id === undefined);
  assert.deepEqual(
    unnamed.slice(0, 5),
    [],
    `${unnamed.length} × 503 queue_unavailable or unconfirmed without the id it minted`,
  );
  return await stage.assertSettled(api, outcomes);
}

/** Waits until a request sent after `since` is accepted; returns the ms since `since`. */
async function acceptingAgain(load: LoadGenerator, since: number): Promise<number> {
  await waitFor(
    "the API to accept again",
    () => load.outcomes.some((o) => o.kind === "accepted" && o.sentAt > since),
    { timeoutMs: 10_000 },
  );
  return Date.now() - since;
}

/**
 * The Redis outage `consumer` went through: it saw it begin and saw it end,
 * so it came back by itself.
 */
function redisOutage(consumer: TaskProcess, stage: Stage<StandaloneRedis>): { ms: number } {
  const events = serviceEvents(consumer.output).filter((e) => e.dependency === "redis");
  const started = events.findIndex((e) => e.event === "outage_started");
  const ended = events.findIndex((e, i) => i > started && e.event === "outage_ended");
  assert.ok(started >= 0, `inconclusive: the consumer never saw Redis go away\n${stage.tails()}`);
  assert.ok(ended > started, `the consumer never saw Redis come back\n${stage.tails()}`);
  return { ms: numberField(events[ended]!, "ms") };
}

async function usedMemory(stage: Stage<StandaloneRedis>): Promise<number> {
  const info = await stage.world.redis.info("memory");
  const used = Number(/^used_memory:(\d+)/m.exec(info)?.[1]);
  assert.ok(used > 0, `no used_memory in INFO memory:\n${info}`);
  return used;
}
