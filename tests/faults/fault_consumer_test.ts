/**
 * Fault scenarios of the consumer (issue #3): consumers SIGKILLed under load,
 * a crash between commit and acknowledgement, a message that crashes every
 * consumer, orphan recovery at the default heartbeat settings, SIGTERM
 * mid-batch, and the control: the course's BRPOP consumer, killed the same
 * way, loses users and the checker sees it. See `stage.ts` for what
 * every scenario is held to.
 *
 * @module
 */

import assert from "node:assert/strict";
import { encodeEnvelope, isUuid, type UserEnvelope } from "@users-pipeline/queue";
import { createCourseApp } from "@users-pipeline/bench/course_producer";
import type { TaskProcess } from "@users-pipeline/harness/processes";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { checkDelivery, type DeliveryReport, describeProblems } from "../support/delivery_check.ts";
import { killAll, processTree } from "../support/process_roster.ts";
import { scenario } from "../support/scenario.ts";
import { envelopes, rowCount, waitForHolders } from "../support/scenario_setups.ts";
import type { EnvChanges } from "../support/service_env.ts";
import type { Stage } from "../support/stage.ts";
import { answers, avg, batchesSummary, seconds, verdict } from "../support/summary_phrases.ts";
import type { Outcome } from "../support/fault_load.ts";
import { hasEvent, numberField, serviceEvents } from "../support/service_events.ts";
import { v7 as uuidv7 } from "uuid";

for (const mode of ["batch", "single"] as const) {
  scenario(
    `consumers SIGKILLed repeatedly under load in ${mode} mode lose nothing`,
    async (stage) => {
      const env = { CONSUMER_MODE: mode, BATCH_SIZE: "1000" };
      const api = await stage.server();
      const consumers = [await stage.consumer(env), await stage.consumer(env)];
      // Single mode stores one row per round trip: keep the load within what two can drain.
      const load = stage.load(
        [api],
        `kills-${mode}`,
        mode === "single" ? { ratePerSecond: 700 } : {},
      );
      // Batches beside it, so that kills land on consumers holding users a batch queued.
      const bulkPrefix = `kills-${mode}-bulk`;
      const bulk = stage.load([api], bulkPrefix, { batchSize: 25, ratePerSecond: 8 });
      const kills = await killRepeatedly(stage, consumers, env, { hits: 6, bulkPrefix });
      const { drainMs, report } = await stage.settle([load, bulk]);
      await stage.stopAll();
      stage.summary(
        `consumer SIGKILL (${mode}): ${
          answers(report)
        }, ${kills.hits} SIGKILLs with a batch in hand ` +
          `(${kills.attempts} sent, ${kills.heldTotal} items held), each batch recovered (at ` +
          `most ${seconds(kills.recoveryBoundMs)}) in ` +
          `${seconds(kills.recoveryAvgMs)} avg / ${seconds(kills.recoveryMaxMs)} max, ` +
          `${verdict(report)}, drained in ${seconds(drainMs)}; ${kills.bulkHeld} users of ` +
          `batches in hand at the kills, ${batchesSummary(bulk.outcomes, "batches")}`,
      );
    },
  );
}

scenario(
  "a crash between commit and acknowledgement with dead letters in the batch buries each once",
  async (stage) => {
    const { redis, sql } = stage.world;
    const good = envelopes(990, "commit-crash");
    const poison = Array.from({ length: 10 }, (_, i) => `not json ${i} {`);
    const items = [...good.map(encodeEnvelope)];
    poison.forEach((p, i) => items.splice(i * 97, 0, p));
    await redis.lpush(stage.keys.queue, ...items);
    const crashing = await stage.crashingConsumer({ FAULT_CRASH_AT: "stored" });
    stage.expectEnd(crashing);
    const status = await crashing.status;
    assert.equal(status.code, 137, `expected the self-inflicted SIGKILL\n${stage.tails()}`);
    // Committed but not acknowledged: the rows exist, the dead letters do not yet.
    assert.equal(await rowCount(sql), good.length, "the good rows are committed before the crash");
    assert.equal(await redis.llen(stage.keys.dead), 0, "no dead letter before the ack");
    const crashedAt = Date.now();
    await stage.consumer();
    const drainMs = await stage.drain();
    const report = await stage.verify([], {
      injected: good.map(({ id, name }) => ({ id, name })),
      deadPayloads: poison,
    });
    await stage.stopAll();
    stage.summary(
      `crash before ack with poison in the batch: ${good.length} good + ${poison.length} poison, ` +
        `1 crash, ${verdict(report)}, dead letters ${poison.length} (each once), drained ` +
        `${seconds(drainMs)} after the restart (${seconds(Date.now() - crashedAt)})`,
    );
  },
);

scenario(
  "the course's producer's users get an id when taken and are stored once through a crash between commit and acknowledgement",
  async (stage) => {
    const { redis, topology: redisServer, sql } = stage.world;
    // The course's producer app as the chapter writes it (tools/bench), its
    // list redirected to this scenario's queue, behind a real HTTP server.
    const producer = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      createCourseApp({ lpush: (_list, item) => redis.lpush(stage.keys.queue, item) }).fetch,
    );
    const names = Array.from({ length: 600 }, (_, i) => `course ${i}`);
    try {
      for (let i = 0; i < names.length; i += 50) {
        const answers = await Promise.all(
          names.slice(i, i + 50).map(async (name) => {
            const response = await fetch(`http://127.0.0.1:${producer.addr.port}/users`, {
              method: "POST",
              body: JSON.stringify({ name }),
            });
            await response.body?.cancel();
            return response.status;
          }),
        );
        assert.deepEqual(answers, Array(answers.length).fill(202));
      }
    } finally {
      await producer.shutdown();
    }
    // And the chapter's command line, `redis-cli LPUSH users '{"name":"Ada"}'`.
    const cli = await new Deno.Command("redis-cli", {
      args: ["-p", String(redisServer.port), "LPUSH", stage.keys.queue, '{"name":"course Ada"}'],
    }).output();
    assert.equal(new TextDecoder().decode(cli.stdout).trim(), String(names.length + 1));
    names.push("course Ada");

    // Stores a batch of 250, commits it, and SIGKILLs itself before acknowledging it.
    const crashing = await stage.crashingConsumer({
      FAULT_CRASH_AT: "stored",
      BATCH_SIZE: "250",
    });
    stage.expectEnd(crashing);
    assert.equal(
      (await crashing.status).code,
      137,
      `expected the self-inflicted SIGKILL\n${stage.tails()}`,
    );
    assert.equal(await rowCount(sql), 250, "the first batch is committed before the crash");
    await stage.consumer({ BATCH_SIZE: "250" });
    const drainMs = await stage.drain();

    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    assert.deepEqual(rows.map((row) => row.name).toSorted(), names.toSorted(), "each user once");
    assert.ok(rows.every((row) => isUuid(row.id) && row.id[14] === "7"), "each under a UUIDv7");
    assert.equal(new Set(rows.map((row) => row.id)).size, rows.length);
    assert.deepEqual(await stage.deadLetters(), []);
    await stage.stopAll();
    stage.summary(
      `the course's producer: ${names.length - 1} POSTs + 1 redis-cli LPUSH of {"name"} items, a ` +
        `crash after committing 250 of them, ${rows.length} rows, each name once under its own ` +
        `id, 0 dead letters, drained in ${seconds(drainMs)} after the restart`,
    );
  },
);

scenario("a message that crashes every consumer is buried after 3 deliveries", async (stage) => {
  const { redis } = stage.world;
  const crasher = `crasher-${uuidv7()}`;
  const good = envelopes(2_999, "crasher-neighbour");
  const killer: UserEnvelope = { id: uuidv7(), name: crasher, enqueued_at: Date.now() };
  const items = good.map(encodeEnvelope);
  items.splice(1_500, 0, encodeEnvelope(killer));
  await redis.lpush(stage.keys.queue, ...items);
  const env = { BATCH_SIZE: "1000", MAX_CRASHES: "3", FAULT_CRASH_ON_NAME: crasher };
  let crashes = 0;
  const startedAt = Date.now();
  // A supervisor's job: restart the consumer whenever it dies.
  let consumer = await stage.crashingConsumer(env);
  const deadline = Date.now() + 40_000;
  while (Date.now() < deadline && (await redis.llen(stage.keys.dead)) === 0) {
    const status = await Promise.race([consumer.status, delay(100).then(() => undefined)]);
    if (status === undefined) continue;
    assert.equal(status.code, 137, `the consumer died otherwise\n${stage.tails()}`);
    stage.expectEnd(consumer);
    crashes++;
    consumer = await stage.crashingConsumer(env);
  }
  const drainMs = await stage.drain();
  const report = await stage.verify([], {
    injected: good.map(({ id, name }) => ({ id, name })),
    deadPayloads: [encodeEnvelope(killer)],
  });
  const [letter] = await stage.deadLetters();
  assert.match(letter!.reason, /crashed while holding it 3 times/);
  assert.equal(crashes, 3, "one crash per delivery, MAX_CRASHES=3");
  await stage.stopAll();
  stage.summary(
    `poison that crashes the consumer: ${crashes} crashes (restarted after each), buried after ` +
      `3 deliveries, ${good.length} neighbours stored, ${verdict(report)}, all done in ` +
      `${seconds(Date.now() - startedAt)} (drain ${seconds(drainMs)})`,
  );
});

/**
 * What the test adds to each recovery bound it checks, for its own measuring: the kill is timed
 * after the signal is sent, each poll waits 20 ms and a round trip, and the survivors' timers fire
 * a little late on a busy machine. docs/delivery.md, "Crashes are recovered": "The fault suite
 * allows 5 ms per item, and 0.2 s on each bound for its own polling and for timers that fire late
 * on a busy machine."
 */
const RECOVERY_SLACK_MS = 200;

/**
 * The allowance per recovered item for storing it, which happens one item at a time (a recovered
 * item is retried alone): a fetch, an insert and an acknowledgement. docs/delivery.md, "Crashes
 * are recovered": an idle consumer "stores them one at a time, under a millisecond each on an idle
 * machine", and "The fault suite allows 5 ms per item".
 */
const RECOVERED_ITEM_STORE_MS = 5;

/**
 * How soon after a consumer's SIGKILL a live consumer must have taken back what it held, under
 * `settings`: docs/delivery.md, "Crashes are recovered": returned to the retry list "within
 * `HEARTBEAT_TTL_MS + RECOVERY_INTERVAL_MS`", plus the suite's {@linkcode RECOVERY_SLACK_MS}.
 */
function recoveryBound(settings: Record<string, string>): number {
  return Number(settings.HEARTBEAT_TTL_MS) + Number(settings.RECOVERY_INTERVAL_MS) +
    RECOVERY_SLACK_MS;
}

scenario(
  "a consumer SIGKILLed with a batch in hand at the default heartbeat settings has it recovered and stored within the delivery contract's bounds",
  async (stage) => {
    const { redis, pg, sql } = stage.world;
    // The documented defaults (project.env), not FAST_ENV's short timings.
    const env: EnvChanges = {
      HEARTBEAT_TTL_MS: undefined,
      RECOVERY_INTERVAL_MS: undefined,
      BLOCK_TIMEOUT_SECONDS: undefined,
      BATCH_SIZE: "500",
    };
    const settings = stage.env(env);
    const ttl = Number(settings.HEARTBEAT_TTL_MS);
    const interval = Number(settings.RECOVERY_INTERVAL_MS);
    const blockMs = Number(settings.BLOCK_TIMEOUT_SECONDS) * 1_000;
    const good = envelopes(2_000, "orphan");
    // Both start (and migrate) while nothing is queued; then, with PostgreSQL
    // frozen, each takes a batch and holds it, its insert waiting.
    const survivor = await stage.consumer(env);
    const victim = await stage.consumer(env);
    const victimKey = stage.processingKey(victim);
    let held: string[];
    let killedAt: number;
    pg.server.freeze();
    try {
      await redis.lpush(stage.keys.queue, ...good.map(encodeEnvelope));
      await waitForHolders(stage, [survivor, victim], 2);
      held = await redis.lrange(victimKey, 0, -1);
      stage.kill(victim);
      killedAt = Date.now();
      await victim.status;
    } finally {
      pg.server.thaw();
    }
    await waitFor("the victim's batch to be recovered", async () => {
      stage.assertRunning();
      return (await redis.exists(victimKey)) === 0;
    }, { timeoutMs: 30_000, intervalMs: 20 });
    const recoveredMs = Date.now() - killedAt;
    const ids = held.map((item) => (JSON.parse(item) as UserEnvelope).id);
    await waitFor("the victim's batch to be stored", async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from users where id in ${sql(ids)}`;
      return row?.n === ids.length;
    }, { timeoutMs: 30_000, intervalMs: 20 });
    const storedMs = Date.now() - killedAt;
    // docs/delivery.md, "Crashes are recovered": back in the retry list "within
    // HEARTBEAT_TTL_MS + RECOVERY_INTERVAL_MS"; then, the survivor being idle
    // by then (the rest of the queue took it well under a second), seen when
    // its blocking wait ends and stored one item at a time.
    const recoveryBoundMs = recoveryBound(settings);
    const storedBoundMs = ttl + interval + blockMs + RECOVERED_ITEM_STORE_MS * ids.length +
      RECOVERY_SLACK_MS;
    assert.ok(
      recoveredMs <= recoveryBoundMs,
      `the orphaned batch was back in the queue ${seconds(recoveredMs)} after the kill: at most ` +
        `HEARTBEAT_TTL_MS ${ttl} + RECOVERY_INTERVAL_MS ${interval} (+${RECOVERY_SLACK_MS} ms)`,
    );
    assert.ok(
      storedMs <= storedBoundMs,
      `the orphaned batch of ${ids.length} was stored ${seconds(storedMs)} after the kill ` +
        `(back in the queue at ${seconds(recoveredMs)}): at most ${seconds(storedBoundMs)}, ` +
        `HEARTBEAT_TTL_MS + RECOVERY_INTERVAL_MS + BLOCK_TIMEOUT_SECONDS + ` +
        `${RECOVERED_ITEM_STORE_MS} ms an item (+${RECOVERY_SLACK_MS} ms)`,
    );
    const drainMs = await stage.drain();
    const report = await stage.verify([], { injected: good.map(({ id, name }) => ({ id, name })) });
    await stage.stopAll();
    stage.summary(
      `orphan recovery at the default HEARTBEAT_TTL_MS ${ttl} / RECOVERY_INTERVAL_MS ` +
        `${interval} / BLOCK_TIMEOUT_SECONDS ${blockMs / 1_000}: a consumer SIGKILLed holding ` +
        `${held.length} items, back in the queue ${seconds(recoveredMs)} (at most ` +
        `${seconds(recoveryBoundMs)}) and stored ${seconds(storedMs)} (at most ` +
        `${seconds(storedBoundMs)}) after the kill; ${good.length} stored, ` +
        `${verdict(report)}, drained in ${seconds(drainMs)}`,
    );
  },
);

scenario(
  "SIGTERM to a consumer mid-batch: it finishes the batch, or past its deadline hands it back, and exits 0",
  async (stage) => {
    const { redis, pg, sql } = stage.world;
    const good = envelopes(3_000, "consumer-sigterm");
    const aside = `${stage.keys.queue}:aside`;
    await redis.lpush(aside, ...good.map(encodeEnvelope));
    /**
     * Starts a consumer (which migrates and registers) while nothing is
     * queued, then freezes PostgreSQL and queues what is aside: the consumer
     * takes a batch and holds it, its insert waiting.
     */
    const holdBatch = async (changes: EnvChanges) => {
      const consumer = await stage.consumer({ BATCH_SIZE: "1000", ...changes });
      pg.server.freeze();
      await redis.rename(aside, stage.keys.queue);
      const [held = 0] = await waitForHolders(stage, [consumer], 1);
      return { consumer, held };
    };
    let first: { consumer: TaskProcess; held: number };
    try {
      // Its statement deadline (FAST_ENV's 2 s) must outlast the freeze, which lasts until the
      // consumer holds its batch and half a second more: on a busy machine that can pass 2 s, and
      // the deadline would then give the batch back, a path this half does not test.
      first = await holdBatch({ STATEMENT_TIMEOUT_MS: "20000" });
      stage.signal(first.consumer, "SIGTERM");
      await delay(500);
    } finally {
      pg.server.thaw();
    }
    const held = first.held;
    let status = await first.consumer.status;
    assert.equal(status.code, 0, stage.tails());
    assert.equal(await rowCount(sql), held, `the batch in hand was finished\n${stage.tails()}`);
    assert.equal(await redis.llen(stage.keys.queue), good.length - held, "no new batch taken");
    assert.deepEqual(await stage.heldLists(), []);

    // Hand-back: the shutdown deadline passes while PostgreSQL stays frozen.
    await redis.rename(stage.keys.queue, aside);
    let second: { consumer: TaskProcess; held: number };
    try {
      second = await holdBatch({ SHUTDOWN_TIMEOUT_MS: "500" });
      stage.signal(second.consumer, "SIGTERM");
      await waitFor(
        "the consumer to hand its batch back (handed_back)",
        () => hasEvent(second.consumer.output, "handed_back"),
        { timeoutMs: 10_000 },
      );
    } finally {
      pg.server.thaw();
    }
    status = await second.consumer.status;
    assert.equal(status.code, 0, stage.tails());
    assert.ok(
      hasEvent(second.consumer.output, "shutdown_deadline"),
      `no shutdown_deadline event\n${stage.tails()}`,
    );
    const [handBack] = serviceEvents(second.consumer.output, "handed_back");
    const handedBack = numberField(handBack!, "items");
    assert.equal(handedBack, second.held, "the whole batch in hand was handed back");
    assert.equal(await redis.llen(stage.keys.queue), good.length - held);
    await stage.consumer();
    const drainMs = await stage.drain();
    const report = await stage.verify([], {
      injected: good.map(({ id, name }) => ({ id, name })),
    });
    await stage.stopAll();
    stage.summary(
      `consumer SIGTERM: with a ${held}-item batch in hand it finished it and exited 0; past its ` +
        `deadline it handed ${handedBack} back and exited 0; ${good.length} stored, ` +
        `${verdict(report)}, drained in ${seconds(drainMs)}`,
    );
  },
);

scenario(
  "control: the course's BRPOP consumer, SIGKILLed the same way, loses users",
  async (stage) => {
    const { redis, sql } = stage.world;
    const api = await stage.server();
    let consumer = await stage.naiveConsumer();
    // A kill loses the item only between the pop and the INSERT being sent
    // (once PostgreSQL has the statement it commits it anyway), so a few
    // kills can all miss: kill in rounds until the checker has seen a loss.
    const outcomes: Outcome[] = [];
    let report: DeliveryReport | undefined;
    let kills = 0;
    for (let round = 0; round < 4 && !(report && report.lost.length > 0); round++) {
      // Faster than one row at a time keeps up with, so it always has an item in hand.
      const load = stage.load([api], `naive${round}`, { ratePerSecond: 2_500 });
      for (let kill = 0; kill < 4; kill++) {
        await delay(300);
        await waitFor(
          "a backlog, so the consumer is busy",
          async () => (await redis.llen(stage.keys.queue)) > 0,
          { intervalMs: 5 },
        );
        stage.kill(consumer);
        kills++;
        await consumer.status;
        consumer = await stage.naiveConsumer();
      }
      outcomes.push(...await load.stop());
      await waitFor("the naive consumer to empty the queue", async () => {
        stage.assertRunning();
        return (await redis.llen(stage.keys.queue)) === 0;
      });
      await delay(300);
      const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
      report = checkDelivery(outcomes, rows);
    }
    assert.ok(report);
    assert.ok(report.lost.length > 0, "the checker must catch the naive consumer's losses");
    // A loss must be the consumer's, not the API's: nothing disturbed the API or Redis, so every
    // request was answered 202, and the consumer holds one item at a time, so each SIGKILL loses
    // at most that one. A BRPOP pops each item once, so nothing is stored twice either.
    const notAccepted = outcomes.filter((o) => o.kind !== "accepted");
    assert.deepEqual(
      notAccepted.slice(0, 5).map((o) => `${o.name}: ${o.kind}, ${o.detail ?? o.status}`),
      [],
      `${notAccepted.length} of ${outcomes.length} requests not answered 202`,
    );
    stage.assertAnswers(outcomes);
    assert.ok(
      report.lost.length <= kills,
      `lost ${report.lost.length} users to ${kills} SIGKILLs of a consumer that holds one at a ` +
        `time: ${describeProblems(report)}`,
    );
    assert.deepEqual(
      [...report.duplicated, ...report.unexpectedRows, ...report.wrongIds].slice(0, 5),
      [],
      describeProblems(report),
    );
    await stage.stopAll();
    stage.summary(
      `control naive BRPOP consumer: ${answers(report)}, ${kills} SIGKILLs, ` +
        `${verdict(report)} — the checker catches loss, at most one per kill`,
    );
  },
);

/**
 * SIGKILLs the consumers in turn (restarting each at once) until `hits` kills
 * landed while the victim held a batch; waits for the victim to hold one
 * first, so few kills are wasted.
 */
async function killRepeatedly(
  stage: Stage,
  consumers: TaskProcess[],
  env: EnvChanges,
  { hits: wanted, gapMs = 400, maxAttempts = 20, bulkPrefix }: {
    hits: number;
    gapMs?: number;
    maxAttempts?: number;
    /** The names' prefix of a bulk client: go on until a kill landed on one of its users too. */
    bulkPrefix?: string;
  },
) {
  const { redis } = stage.world;
  const ofBatch = (items: readonly string[]) =>
    bulkPrefix === undefined
      ? 0
      : items.filter((item) => JSON.parse(item).name.startsWith(`${bulkPrefix}-`)).length;
  let hits = 0;
  let attempts = 0;
  let heldTotal = 0;
  let bulkHeld = 0;
  const recoveries: Promise<number>[] = [];
  for (
    let slot = 0;
    (hits < wanted || (bulkPrefix !== undefined && bulkHeld === 0)) && attempts < maxAttempts;
    slot = (slot + 1) % consumers.length
  ) {
    attempts++;
    await delay(gapMs);
    const victim = consumers[slot]!;
    const key = stage.processingKey(victim);
    // Read the process tree first: the kill must follow the check at once, or
    // the batch seen in hand is acknowledged before the signal lands.
    const pids = processTree(victim.pid);
    const until = Date.now() + 1_000;
    // Until a kill caught a user of a batch, wait for one in hand: a batch's users arrive as one
    // block, which a consumer in batch mode takes in one fetch among many of the load's.
    const wantBulk = bulkPrefix !== undefined && bulkHeld === 0;
    while (Date.now() < until) {
      const inHand = wantBulk ? ofBatch(await redis.lrange(key, 0, -1)) : await redis.llen(key);
      if (inHand > 0) break;
      await delay(1);
    }
    stage.expectEnd(victim);
    killAll(pids, "SIGKILL");
    const killedAt = Date.now();
    // Its heartbeat outlives it by at least 600 ms: what it held is still there.
    const items = await redis.lrange(key, 0, -1);
    const held = items.length;
    bulkHeld += ofBatch(items);
    await victim.status;
    consumers[slot] = await stage.consumer(env);
    if (held === 0) continue;
    hits++;
    heldTotal += held;
    recoveries.push(
      waitFor("the victim's batch to be recovered", async () => (await redis.exists(key)) === 0, {
        timeoutMs: 30_000,
        intervalMs: 20,
      }).then(() => Date.now() - killedAt),
    );
  }
  const times = await Promise.all(recoveries);
  assert.ok(
    hits >= wanted,
    `inconclusive: only ${hits} of ${attempts} kills landed with a batch in hand`,
  );
  assert.ok(
    bulkPrefix === undefined || bulkHeld > 0,
    `inconclusive: none of ${attempts} kills landed with a user of a batch in hand`,
  );
  const settings = stage.env(env);
  const recoveryBoundMs = recoveryBound(settings);
  assert.ok(
    Math.max(...times) <= recoveryBoundMs,
    `a SIGKILLed consumer's batch was back in the queue ${times.map(seconds).join(", ")} after ` +
      `each kill: at most HEARTBEAT_TTL_MS ${settings.HEARTBEAT_TTL_MS} + RECOVERY_INTERVAL_MS ` +
      `${settings.RECOVERY_INTERVAL_MS} (+${RECOVERY_SLACK_MS} ms)`,
  );
  return {
    hits,
    attempts,
    heldTotal,
    bulkHeld,
    recoveryAvgMs: avg(times),
    recoveryMaxMs: Math.max(...times),
    recoveryBoundMs,
  };
}
