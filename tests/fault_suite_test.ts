/**
 * Issue #3, "Nothing accepted is ever lost": the pipeline under crashes,
 * outages, poison and shutdowns, with the API and the consumers as real
 * processes against a real Redis and PostgreSQL on loopback.
 *
 * The promise checked after every scenario, once the queue is drained: every
 * request answered 202 is exactly one row of `users` (under the id it was
 * given) or, if it can never be stored, one entry of the dead letters with the
 * reason; every other answer is a precise error (4xx, or 503 with
 * Retry-After), never a 500 and never a hang. Requests whose connection broke
 * are indeterminate: stored once or not at all. See `delivery_check.ts`.
 *
 * A fault that hit nothing (a kill while no batch was in hand, an outage no
 * request saw) proves nothing, so each scenario checks that its fault landed
 * and fails as inconclusive otherwise. Each prints one summary line with its
 * figures. `TEST_VERBOSE=1` echoes the services' output.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import postgres from "postgres";
import { v7 as uuidv7 } from "uuid";
import { encodeEnvelope, type UserEnvelope } from "../queue/envelope.ts";
import { type QueueKeys, queueKeys } from "../queue/keys.ts";
import { type DeadLetter, RedisQueue } from "../queue/redis_queue.ts";
import {
  checkDelivery,
  deliveryHeld,
  type DeliveryReport,
  describeProblems,
  type Injected,
} from "./delivery_check.ts";
import { LoadGenerator, type Outcome } from "./fault_load.ts";
import { type NaiveConsumer, startNaiveConsumer } from "./naive_consumer.ts";
import { TaskProcess } from "../tools/harness/processes.ts";
import { waitFor } from "../tools/harness/wait.ts";
import { freePort } from "../tools/harness/ports.ts";
import {
  migrate,
  startPostgres,
  startRedis,
  type TestPostgres,
  type TestRedis,
} from "../tools/harness/services.ts";

/** Timings short enough that recovery happens within a test (see the issue). */
const FAST_ENV = {
  HEARTBEAT_TTL_MS: "1000",
  RECOVERY_INTERVAL_MS: "200",
  STATEMENT_TIMEOUT_MS: "2000",
  REDIS_TIMEOUT_MS: "500",
  RETRY_MAX_DELAY_MS: "500",
  BLOCK_TIMEOUT_SECONDS: "1",
  SHUTDOWN_TIMEOUT_MS: "10000",
};

/** Test clients' application_name, so terminating "every backend" spares the test itself. */
const TEST_APP = "fault-suite";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The services shared by every scenario. */
interface World {
  readonly redisServer: TestRedis;
  readonly pg: TestPostgres;
  readonly redis: Redis;
  readonly sql: postgres.Sql;
  readonly summaries: string[];
}

/** A running API replica. */
interface Api {
  readonly process: TaskProcess;
  readonly url: string;
  readonly port: number;
}

/** Options of {@linkcode Stage.verify}. */
interface VerifyOptions {
  /** Users pushed straight into Redis, expected stored under their id. */
  injected?: readonly Injected[];
  /** Exactly the payloads the dead letters must hold (any order). @default [] */
  deadPayloads?: readonly string[];
  /** Items allowed in the dead letters beyond `deadPayloads`, at most once each. */
  maybeDead?: readonly string[];
  /** Names pushed straight into Redis that may be stored (at most once) or not. */
  mayStore?: readonly string[];
}

/**
 * One scenario's queue (a fresh name), its processes (SIGKILLed on dispose if
 * still running) and the checks.
 */
class Stage implements AsyncDisposable {
  readonly keys: QueueKeys;
  readonly #world: World;
  readonly #processes: {
    name: string;
    output: string[];
    kill(signal?: Deno.Signal): void;
    status: Promise<unknown>;
  }[] = [];
  static #counter = 0;

  private constructor(world: World) {
    this.#world = world;
    this.keys = queueKeys(`fault${++Stage.#counter}`);
  }

  /** A fresh queue and an empty table. */
  static async open(world: World): Promise<Stage> {
    await world.sql`truncate users`;
    return new Stage(world);
  }

  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      ...Deno.env.toObject(),
      ...this.#world.pg.env,
      REDIS_URL: this.#world.redisServer.url,
      QUEUE_NAME: this.keys.queue,
      ...FAST_ENV,
      ...extra,
    };
  }

  /** Starts an API replica (on `port` if given) and waits until it answers. */
  async server(extra: Record<string, string> = {}, port = freePort()): Promise<Api> {
    const process = new TaskProcess(
      "server",
      this.env({ PORT: String(port), ...extra }),
      `server:${port}`,
    );
    this.#processes.push(process);
    const url = `http://127.0.0.1:${port}`;
    await waitFor(`the API on port ${port} to answer`, async () => {
      try {
        const response = await fetch(`${url}/health`);
        await response.body?.cancel();
        return response.ok;
      } catch {
        return false;
      }
    }, { timeoutMs: 20_000 });
    return { process, url, port };
  }

  /** Starts a consumer and waits until it registered. */
  async consumer(extra: Record<string, string> = {}): Promise<TaskProcess> {
    const process = new TaskProcess("consumer", this.env(extra));
    this.#processes.push(process);
    await waitFor(
      "a consumer to register",
      () => process.output.some((line) => / started \(batch size/.test(line)),
      { timeoutMs: 20_000 },
    );
    return process;
  }

  /** Starts the course's BRPOP consumer. */
  async naiveConsumer(): Promise<NaiveConsumer> {
    const process = startNaiveConsumer(this.env());
    this.#processes.push({ name: "naive", ...process });
    await waitFor(
      "the naive consumer to start",
      () => process.output.some((line) => line.startsWith("naive consumer popping")),
      { timeoutMs: 20_000 },
    );
    return process;
  }

  /** Starts a load generator against `apis`. */
  load(
    apis: readonly Api[],
    prefix: string,
    options: { concurrency?: number; ratePerSecond?: number; limit?: number } = {},
  ) {
    return new LoadGenerator({ urls: apis.map((api) => api.url), prefix, ...options }).start();
  }

  /** The processing list of the consumer a process last registered as. */
  processingKey(consumer: TaskProcess): string {
    let id: string | undefined;
    for (const line of consumer.output) {
      const match = /consumer (\S+) started|continuing as (\S+)$/.exec(line);
      if (match) id = match[1] ?? match[2];
    }
    assert.ok(id, `no consumer id in the output of ${consumer.name}`);
    return this.keys.processingPrefix + id;
  }

  /** Every processing list of this queue that holds items, live consumers or not. */
  async processingKeys(): Promise<string[]> {
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await this.#world.redis.scan(
        cursor,
        "MATCH",
        `${this.keys.processingPrefix}*`,
        "COUNT",
        1000,
      );
      cursor = next;
      found.push(...keys);
    } while (cursor !== "0");
    return found;
  }

  /** Waits until the main, retry and every processing list are empty; returns the ms it took. */
  async drain(timeoutMs = 60_000): Promise<number> {
    const redis = this.#world.redis;
    try {
      return await waitFor(`queue ${this.keys.queue} to drain`, async () => {
        const [queued, retry] = await Promise.all([
          redis.llen(this.keys.queue),
          redis.llen(this.keys.retry),
        ]);
        return queued + retry === 0 && (await this.processingKeys()).length === 0;
      }, { timeoutMs, intervalMs: 100 });
    } catch (error) {
      const lengths = await Promise.all(
        [this.keys.queue, this.keys.retry, ...await this.processingKeys()].map(async (key) =>
          `${key}: ${await redis.llen(key)}`
        ),
      );
      throw new Error(`${error}\n${lengths.join(", ")}\n${this.tails(30)}`, { cause: error });
    }
  }

  /**
   * The backlog now, and how long the consumers take to bring it under 200
   * items while the load goes on: the recovery time after an outage.
   */
  async catchUp(): Promise<{ backlog: number; ms: number }> {
    const redis = this.#world.redis;
    // Queued, retried or held by a consumer: not stored yet.
    const pending = async () => {
      const keys = [this.keys.queue, this.keys.retry, ...await this.processingKeys()];
      const lengths = await Promise.all(keys.map((key) => redis.llen(key)));
      return lengths.reduce((a, b) => a + b, 0);
    };
    const backlog = await pending();
    const ms = await waitFor("the consumers to catch up", async () => (await pending()) < 200, {
      timeoutMs: 60_000,
      intervalMs: 20,
    });
    return { backlog, ms };
  }

  /** The dead letters, parsed. */
  async deadLetters(): Promise<DeadLetter[]> {
    const raw = await this.#world.redis.lrange(this.keys.dead, 0, -1);
    return raw.map((entry) => JSON.parse(entry) as DeadLetter);
  }

  /**
   * The promise, once drained: nothing lost, doubled or invented, no
   * forbidden answer, the dead letters exactly as expected, every list empty.
   */
  async verify(outcomes: readonly Outcome[], options: VerifyOptions = {}): Promise<DeliveryReport> {
    const { sql, redis } = this.#world;
    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    const report = checkDelivery(outcomes, rows, options);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${this.tails()}`);

    const dead = (await this.deadLetters()).map((letter) => letter.payload);
    const expected = [...(options.deadPayloads ?? [])];
    const extra: string[] = [];
    for (const payload of dead) {
      const i = expected.indexOf(payload);
      if (i >= 0) expected.splice(i, 1);
      else extra.push(payload);
    }
    const maybe = [...(options.maybeDead ?? [])];
    const unexplained = extra.filter((payload) => {
      const i = maybe.indexOf(payload);
      if (i < 0) return true;
      maybe.splice(i, 1);
      return false;
    });
    const short = (payloads: string[]) => payloads.map((p) => p.slice(0, 120)).join("\n  ");
    assert.equal(
      unexplained.length + expected.length,
      0,
      `dead letters differ: unexpected:\n  ${short(unexplained)}\nmissing:\n  ${short(expected)}`,
    );
    assert.deepEqual(
      await Promise.all([redis.llen(this.keys.queue), redis.llen(this.keys.retry)]),
      [0, 0],
    );
    assert.deepEqual(await this.processingKeys(), []);
    assert.equal(await redis.hlen(this.keys.deliveries), 0, "crash counts left behind");
    return report;
  }

  /** Stops every process still running with SIGTERM and checks each exits 0. */
  async stopAll(): Promise<void> {
    for (const process of this.#processes) {
      if (!(process instanceof TaskProcess)) continue;
      const status = await Promise.race([process.status, sleep(0).then(() => undefined)]);
      if (status !== undefined) continue;
      signalService(process, "SIGTERM");
      const stopped = await Promise.race([process.status, sleep(20_000).then(() => undefined)]);
      assert.ok(stopped, `${process.name} still runs 20 s after SIGTERM\n${this.tails()}`);
      assert.equal(
        stopped.code,
        0,
        `${process.name} exited ${stopped.code} (${stopped.signal})\n${this.tails()}`,
      );
    }
  }

  /** The last lines of every process, for failure messages. */
  tails(lines = 15): string {
    return this.#processes
      .map((p) => `--- ${p.name}\n${p.output.slice(-lines).join("\n")}`)
      .join("\n");
  }

  /** Prints and keeps a scenario's summary line. */
  summary(line: string): void {
    console.log(line);
    this.#world.summaries.push(line);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const process of this.#processes) process.kill("SIGKILL");
    await Promise.allSettled(this.#processes.map((process) => process.status));
  }
}

/** `accepted, rejected, indeterminate` as a phrase. */
function answers(report: DeliveryReport): string {
  const parts = [`${report.accepted} accepted`];
  if (report.rejected > 0) parts.push(`${report.rejected} refused`);
  if (report.indeterminate > 0) {
    parts.push(`${report.indeterminate} indeterminate (${report.indeterminateStored} stored)`);
  }
  return parts.join(", ");
}

function verdict(report: DeliveryReport): string {
  return `lost ${report.lost.length}, dup ${report.duplicated.length}, ` +
    `unexpected rows ${report.unexpectedRows.length}`;
}

/** The refusals by status and reason, e.g. `503 queue is full × 1000`. */
function refusals(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) {
    if (o.kind !== "rejected") continue;
    const key = `${o.status} ${o.detail}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([key, n]) => `${key} × ${n}`).join("; ") || "none refused";
}

/** Envelopes as the API would queue them. */
function envelopes(count: number, prefix: string): UserEnvelope[] {
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: `${prefix}-${i}`,
    enqueued_at: Date.now(),
  }));
}

Deno.test({
  name: "fault suite: nothing accepted is ever lost",
  // The fetch client keeps connections to the APIs pooled between scenarios.
  sanitizeResources: false,
}, async (t) => {
  await using redisServer = await startRedis();
  await using pg = await startPostgres();
  await migrate(pg.env);
  const sql = postgres({
    ...pgOptions(pg),
    max: 2,
    onnotice: () => {},
    connection: { application_name: TEST_APP },
  });
  const redis = new Redis(redisServer.url);
  // Redis is killed on purpose below; the commands retry, the events need no printing.
  redis.on("error", () => {});
  const world: World = { redisServer, pg, redis, sql, summaries: [] };
  const started = Date.now();

  try {
    for (const mode of ["batch", "single"] as const) {
      await step(
        t,
        `1 ${mode}: consumers SIGKILLed repeatedly under load lose nothing`,
        async () => {
          await using stage = await Stage.open(world);
          const env = { CONSUMER_MODE: mode, BATCH_SIZE: "1000" };
          const api = await stage.server();
          const consumers = [await stage.consumer(env), await stage.consumer(env)];
          // Single mode stores one row per round trip: keep the load within what two can drain.
          const load = stage.load(
            [api],
            `s1${mode}`,
            mode === "single" ? { ratePerSecond: 700 } : {},
          );
          const kills = await killRepeatedly(stage, redis, consumers, env, { hits: 6 });
          const outcomes = await load.stop();
          const drainMs = await stage.drain();
          const report = await stage.verify(outcomes);
          await stage.stopAll();
          stage.summary(
            `scenario 1 ${mode}: ${answers(report)}, ${kills.hits} SIGKILLs with a batch in hand ` +
              `(${kills.attempts} sent, ${kills.heldTotal} items held), recovered in ${
                seconds(kills.recoveryAvgMs)
              } avg / ` +
              `${seconds(kills.recoveryMaxMs)} max, ${verdict(report)}, drained in ${
                seconds(drainMs)
              }`,
          );
        },
      );
    }

    await step(
      t,
      "2 a crash between commit and acknowledgement with dead letters in the batch buries each once",
      async () => {
        await using stage = await Stage.open(world);
        const good = envelopes(990, "s2");
        const poison = Array.from({ length: 10 }, (_, i) => `not json ${i} {`);
        const items = [...good.map(encodeEnvelope)];
        poison.forEach((p, i) => items.splice(i * 97, 0, p));
        await redis.lpush(stage.keys.queue, ...items);
        const crashing = await stage.consumer({ FAULT_CRASH_AT: "stored" });
        const status = await crashing.status;
        assert.equal(status.code, 137, `expected the self-inflicted SIGKILL\n${stage.tails()}`);
        // Committed but not acknowledged: the rows exist, the dead letters do not yet.
        const count = await rowCount(sql);
        assert.equal(count, good.length, "the good rows are committed before the crash");
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
          `scenario 2 crash before ack with poison in the batch: ${good.length} good + ` +
            `${poison.length} poison, 1 crash, ${verdict(report)}, dead letters ${poison.length} ` +
            `(each once), drained ${seconds(drainMs)} after the restart (${
              seconds(Date.now() - crashedAt)
            })`,
        );
      },
    );

    await step(
      t,
      "3 an API replica SIGKILLed under load: every 202 it gave is stored",
      async () => {
        await using stage = await Stage.open(world);
        const victim = await stage.server();
        const other = await stage.server();
        await stage.consumer();
        await stage.consumer();
        const load = stage.load([victim, other], "s3", { concurrency: 24 });
        let current = victim;
        let hits = 0;
        let attempts = 0;
        const restartMs: number[] = [];
        while (hits < 3 && attempts < 10) {
          attempts++;
          await sleep(700);
          // Read the process tree first, so the kill follows the snapshot at once.
          const pids = processTree(current.process.pid);
          // A 200 ms Redis stall holds requests inside the replica (their pushes
          // sent, no reply yet), so the kill surely lands on some: a replica this
          // fast otherwise has answered nearly everything the client still waits for.
          let inFlight: string[] = [];
          let killedAt = 0;
          redisServer.server.freeze();
          try {
            await sleep(100);
            inFlight = load.inFlightNames(victim.url);
            killAll(pids, "SIGKILL");
            killedAt = Date.now();
            await sleep(100);
          } finally {
            redisServer.server.thaw();
          }
          await current.process.status;
          current = await stage.server({}, victim.port);
          restartMs.push(Date.now() - killedAt);
          // The kill hit if some request it had was cut off rather than answered.
          const cut = load.outcomes.filter((o) =>
            inFlight.includes(o.name) && o.kind === "indeterminate"
          );
          if (cut.length > 0) hits++;
        }
        await sleep(500);
        const outcomes = await load.stop();
        assert.ok(hits >= 3, `inconclusive: only ${hits} of ${attempts} kills cut off a request`);
        const drainMs = await stage.drain();
        const report = await stage.verify(outcomes);
        await stage.stopAll();
        stage.summary(
          `scenario 3 API SIGKILL: ${answers(report)} [${refusals(outcomes)}], ${hits} SIGKILLs ` +
            `with requests in flight, held there by a 0.2 s Redis stall (${attempts} sent), replica back in ${
              seconds(avg(restartMs))
            } avg, ${verdict(report)}, ` +
            `drained in ${seconds(drainMs)}`,
        );
      },
    );

    await step(t, "4a Redis kill -9 and restart from its AOF mid-run loses nothing", async () => {
      await using stage = await Stage.open(world);
      const api = await stage.server();
      // One consumer in single mode cannot keep up, so a backlog sits in Redis when it dies.
      const consumers = [await stage.consumer({ CONSUMER_MODE: "single" })];
      const load = stage.load([api], "s4a");
      await sleep(2_000);
      // Spares, SIGTERMed while Redis is down: they must still exit 0.
      const spareApi = await stage.server();
      const spareConsumer = await stage.consumer({
        CONSUMER_MODE: "single",
        SHUTDOWN_TIMEOUT_MS: "300",
      });
      const backlog = await redis.llen(stage.keys.queue);
      const acceptedBefore = load.count("accepted");
      redisServer.server.kill("SIGKILL");
      const killedAt = Date.now();
      await redisServer.server.exited;
      signalService(spareApi.process, "SIGTERM");
      signalService(spareConsumer, "SIGTERM");
      await sleep(1_500);
      const spares = await Promise.all(
        [spareApi.process, spareConsumer].map((p) =>
          Promise.race([p.status, sleep(5_000).then(() => undefined)])
        ),
      );
      await redisServer.server.start();
      const restartedAt = Date.now();
      assert.deepEqual(
        spares.map((status) => status?.code),
        [0, 0],
        `an API and a consumer SIGTERMed while Redis is down exit 0\n${stage.tails()}`,
      );
      // Everything acknowledged before the kill was in the OS's page cache: the
      // AOF reload holds at least the backlog that was there.
      const reloaded = await redis.llen(stage.keys.queue);
      await waitFor(
        "the API to accept again",
        () => load.outcomes.some((o) => o.kind === "accepted" && o.sentAt > restartedAt),
        {
          timeoutMs: 10_000,
        },
      );
      const apiBackMs = Date.now() - restartedAt;
      await sleep(1_000);
      const outcomes = await load.stop();
      consumers.push(await stage.consumer());
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes);
      const during = outcomes.filter((o) => o.sentAt >= killedAt && o.sentAt < restartedAt);
      assert.ok(backlog > 0, "inconclusive: nothing was queued when Redis died");
      assert.ok(
        during.some((o) => o.status === 503),
        "inconclusive: no request was answered while Redis was down",
      );
      await stage.stopAll();
      stage.summary(
        `scenario 4a Redis kill -9: ${answers(report)} (${acceptedBefore} before the kill, ` +
          `backlog ${backlog} in Redis at the kill, ${reloaded} reloaded from the AOF), ` +
          `${during.filter((o) => o.status === 503).length} × 503 while down, ` +
          `API accepting ${seconds(apiBackMs)} after the restart, ${verdict(report)}, ` +
          `drained in ${seconds(drainMs)}; an API and a consumer SIGTERMed while it was down ` +
          `exited 0`,
      );
    });

    await step(
      t,
      "4b Redis frozen: prompt 503s with Retry-After, then the consumers resume",
      async () => {
        await using stage = await Stage.open(world);
        const api = await stage.server();
        await stage.consumer();
        await stage.consumer();
        const load = stage.load([api], "s4b", { ratePerSecond: 1_000 });
        await sleep(1_500);
        redisServer.server.freeze();
        const frozenAt = Date.now();
        let thawedAt = 0;
        try {
          await sleep(6_000);
        } finally {
          redisServer.server.thaw();
          thawedAt = Date.now();
        }
        await waitFor(
          "the API to accept again",
          () => load.outcomes.some((o) => o.kind === "accepted" && o.sentAt > thawedAt),
          {
            timeoutMs: 10_000,
          },
        );
        const apiBackMs = Date.now() - thawedAt;
        await sleep(1_500);
        const outcomes = await load.stop();
        const drainMs = await stage.drain();
        // Requests sent well inside the freeze: none could be queued, each must
        // be a prompt 503 with Retry-After.
        const inside = outcomes.filter((o) =>
          o.sentAt >= frozenAt + 100 && o.sentAt < thawedAt - 1_000
        );
        assert.ok(inside.length > 0, "inconclusive: no request was sent during the freeze");
        const bad = inside.filter((o) => o.status !== 503 || o.retryAfter === null);
        assert.deepEqual(bad.slice(0, 5), [], `${bad.length} requests during the freeze not a 503`);
        const slowest = Math.max(...outcomes.map((o) => o.ms));
        assert.ok(slowest < 1_500, `a request took ${slowest} ms: the API must answer within ~1 s`);
        const report = await stage.verify(outcomes);
        await stage.stopAll();
        stage.summary(
          `scenario 4b Redis SIGSTOP ${seconds(thawedAt - frozenAt)}: ${answers(report)}, ` +
            `${inside.length} × 503 during the freeze, slowest answer ${slowest} ms, ` +
            `API accepting ${seconds(apiBackMs)} after SIGCONT, ${verdict(report)}, ` +
            `drained in ${seconds(drainMs)}`,
        );
      },
    );

    await step(
      t,
      "4c a Redis reply lost after the command ran (fetch or ack sent again) loses nothing",
      async () => {
        // A command that times out client-side still runs once Redis resumes
        // (a stall longer than the consumer's 10 s command timeout), and a
        // kill -9 between the AOF write and the reply loses the reply alone.
        // The consumer then sends the same fetch or ack again. Replayed here
        // at the protocol level, where the timing is exact.
        await using stage = await Stage.open(world);
        const queue = new RedisQueue(redis, stage.keys);
        const users = envelopes(10, "s4c");
        await queue.enqueue(1_000, ...users.map(encodeEnvelope));
        const id = uuidv7();
        await queue.register(id, 60_000);
        const lost = await queue.fetch(id, 4); // its reply never reached the consumer
        const retried = await queue.fetch(id, 4);
        assert.ok(lost && retried);
        // The consumer stores what the retried fetch returned, then acknowledges it.
        const handled = new Set(retried.items);
        const poison = { payload: "x", reason: "test", dead_at: new Date().toISOString() };
        assert.equal(await queue.ack(id, retried, [poison]), true);
        assert.equal(await queue.ack(id, retried, [poison]), true, "the ack, sent again");
        const remaining = [
          ...(await redis.lrange(stage.keys.queue, 0, -1)),
          ...(await redis.lrange(stage.keys.processingPrefix + id, 0, -1)),
        ];
        const dropped = lost.items.filter((item) =>
          !handled.has(item) && !remaining.includes(item)
        );
        assert.deepEqual(dropped, [], "items taken by the lost fetch were acknowledged unstored");
        assert.equal(
          await redis.llen(stage.keys.dead),
          1,
          "a replayed ack buries its letters once",
        );
        await queue.handBack(id);
        stage.summary(
          `scenario 4c lost Redis reply: fetch sent twice then acked, ack sent twice: ` +
            `dropped ${dropped.length} of ${lost.items.length} items, dead letters ` +
            `${await redis.llen(stage.keys.dead)} (1 expected)`,
        );
      },
    );

    await step(t, "5a PostgreSQL stopped -m immediate mid-run, then started", async () => {
      await using stage = await Stage.open(world);
      const api = await stage.server();
      const consumers = [await stage.consumer(), await stage.consumer()];
      const load = stage.load([api], "s5a", { ratePerSecond: 1_000 });
      await sleep(1_500);
      await pg.server.stop("immediate");
      const stoppedAt = Date.now();
      await sleep(10_000);
      await pg.server.start();
      const startedAt = Date.now();
      const caughtUp = await stage.catchUp();
      await sleep(300);
      const outcomes = await load.stop();
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes);
      assert.equal(
        report.rejected + report.indeterminate,
        0,
        "the API needs no PostgreSQL to accept",
      );
      const noticed = consumers.filter((c) =>
        c.output.some((l) => l.includes("postgres unavailable"))
      );
      assert.ok(noticed.length > 0, `inconclusive: no consumer saw the outage\n${stage.tails()}`);
      await stage.stopAll();
      stage.summary(
        `scenario 5a PostgreSQL down ${seconds(startedAt - stoppedAt)} (-m immediate): ` +
          `${answers(report)}, ${noticed.length} consumers saw it, backlog of ` +
          `${caughtUp.backlog} cleared ${seconds(caughtUp.ms)} after it was up again, ` +
          `${verdict(report)}, drained ${seconds(drainMs)} after the load stopped`,
      );
    });

    await step(t, "5b PostgreSQL frozen (SIGSTOP on all its processes)", async () => {
      await using stage = await Stage.open(world);
      const api = await stage.server();
      const consumers = [await stage.consumer(), await stage.consumer()];
      const load = stage.load([api], "s5b", { ratePerSecond: 1_500 });
      await sleep(1_000);
      // Freezes of whole multiples of STATEMENT_TIMEOUT_MS: the thaw then lands
      // as a client replaced at the deadline is opening its connection, the
      // moment that once crashed every consumer (see server-consumer/main.ts).
      const frozenMs: number[] = [];
      const catchUps: { backlog: number; ms: number }[] = [];
      for (const ms of [4_000, 2_000]) {
        pg.server.freeze();
        const frozenAt = Date.now();
        try {
          await sleep(ms);
        } finally {
          pg.server.thaw();
        }
        frozenMs.push(Date.now() - frozenAt);
        catchUps.push(await stage.catchUp());
        await sleep(300);
      }
      const outcomes = await load.stop();
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes);
      const noticed = consumers.filter((c) =>
        c.output.some((l) => l.includes("postgres unavailable"))
      );
      assert.ok(noticed.length > 0, `inconclusive: no consumer saw the freeze\n${stage.tails()}`);
      await stage.stopAll();
      stage.summary(
        `scenario 5b PostgreSQL SIGSTOP ${frozenMs.map(seconds).join(" + ")}: ${
          answers(report)
        }, ` +
          `${noticed.length} consumers timed out and retried, backlogs of ${
            catchUps.map((c) => c.backlog).join(" and ")
          } cleared in ${catchUps.map((c) => seconds(c.ms)).join(" and ")} after SIGCONT, ` +
          `${verdict(report)}, drained ${seconds(drainMs)} after the load stopped`,
      );
    });

    await step(t, "5c PostgreSQL backends terminated repeatedly", async () => {
      await using stage = await Stage.open(world);
      const api = await stage.server();
      const consumers = [await stage.consumer(), await stage.consumer()];
      const load = stage.load([api], "s5c");
      await sleep(500);
      const admin = postgres({
        ...pgOptions(pg),
        max: 1,
        onnotice: () => {},
        connection: { application_name: `${TEST_APP}-admin` },
      });
      let terminated = 0;
      let rounds = 0;
      try {
        const until = Date.now() + 3_000;
        while (Date.now() < until) {
          const [row] = await admin<{ n: number }[]>`
            select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
            where usename = current_user and pid <> pg_backend_pid()
              and application_name not like ${`${TEST_APP}%`}`;
          terminated += row?.n ?? 0;
          rounds++;
          await sleep(150);
        }
      } finally {
        await admin.end();
      }
      await sleep(300);
      const outcomes = await load.stop();
      const drainMs = await stage.drain();
      const report = await stage.verify(outcomes);
      const errors = consumers
        .flatMap((c) => c.output)
        .filter((l) => l.includes("postgres unavailable")).length;
      assert.ok(errors > 0, `inconclusive: no insert was cut off (${terminated} backends killed)`);
      await stage.stopAll();
      stage.summary(
        `scenario 5c pg_terminate_backend × ${rounds} rounds (${terminated} backends): ` +
          `${answers(report)}, ${errors} insert outages seen by consumers, ${verdict(report)}, ` +
          `drained in ${seconds(drainMs)}`,
      );
    });

    await step(
      t,
      "6 poison mixed into 20k good items is buried, every good item stored",
      async () => {
        await using stage = await Stage.open(world);
        const good = envelopes(20_000, "s6");
        const id = () => uuidv7();
        const now = Date.now();
        const envelope = (fields: Record<string, unknown>) =>
          JSON.stringify({ id: id(), name: "poison", enqueued_at: now, ...fields });
        const twinId = id();
        const twins = [
          encodeEnvelope({ id: twinId, name: "s6-twin-a", enqueued_at: now }),
          encodeEnvelope({ id: twinId, name: "s6-twin-b", enqueued_at: now }),
        ];
        const poison = [
          "not json {",
          "",
          "[1, 2, 3]",
          '"just a string"',
          "null",
          "42",
          envelope({ name: 5 }),
          envelope({ name: null }),
          JSON.stringify({ name: "no id", enqueued_at: now }),
          envelope({ id: "NOT-A-UUID" }),
          envelope({ id: id().toUpperCase() }),
          envelope({ enqueued_at: "yesterday" }),
          envelope({ enqueued_at: -1 }),
          envelope({ name: "nul\u0000byte" }),
          envelope({ name: "x".repeat(1_048_576) }),
          envelope({ name: "lone \ud800 surrogate" }),
          envelope({ name: "  untrimmed  " }),
          envelope({ name: "" }),
          // Valid to the decoder, refused by PostgreSQL (timestamp out of range,
          // SQLSTATE 22008): the writer must split its batch down to this row.
          envelope({ name: "s6-far-future", enqueued_at: 1e300 }),
        ];
        const items = good.map(encodeEnvelope);
        for (const [i, item] of [...poison, ...twins].entries()) {
          items.splice(Math.floor(((i + 1) * items.length) / (poison.length + 3)), 0, item);
        }
        for (let i = 0; i < items.length; i += 1_000) {
          await redis.lpush(stage.keys.queue, ...items.slice(i, i + 1_000));
        }
        const startedAt = Date.now();
        await stage.consumer({ BATCH_SIZE: "1000" });
        await stage.consumer({ BATCH_SIZE: "1000" });
        const drainMs = await stage.drain();
        const report = await stage.verify([], {
          injected: good.map(({ id, name }) => ({ id, name })),
          deadPayloads: poison,
          maybeDead: twins,
          mayStore: ["s6-twin-a", "s6-twin-b"],
        });
        // Exactly one twin stored, the other buried as an id clash.
        const stored = await sql<{ name: string }[]>`select name from users where id = ${twinId}`;
        assert.equal(stored.length, 1);
        const buried = (await stage.deadLetters()).filter((l) => twins.includes(l.payload));
        assert.equal(buried.length, 1, "one twin in the dead letters");
        assert.notEqual(JSON.parse(buried[0]!.payload).name, stored[0]!.name);
        assert.match(buried[0]!.reason, /different name/);
        const sqlstates = (await stage.deadLetters()).filter((l) => l.sqlstate).map((l) =>
          l.sqlstate
        );
        assert.deepEqual(sqlstates, ["22008"], "the far-future row is refused by PostgreSQL");
        await stage.stopAll();
        stage.summary(
          `scenario 6 poison: ${good.length} good + ${poison.length} poison + 2 same-id twins, ` +
            `BATCH_SIZE=1000: ${good.length + 1} stored, ${poison.length + 1} dead-lettered with ` +
            `their reason, ${verdict(report)}, drained in ${seconds(drainMs)} (${
              seconds(Date.now() - startedAt)
            } incl. start)`,
        );
      },
    );

    await step(
      t,
      "7 a message that crashes every consumer is buried after 3 deliveries",
      async () => {
        await using stage = await Stage.open(world);
        const crasher = `s7-crasher-${uuidv7()}`;
        const good = envelopes(2_999, "s7");
        const killer: UserEnvelope = { id: uuidv7(), name: crasher, enqueued_at: Date.now() };
        const items = good.map(encodeEnvelope);
        items.splice(1_500, 0, encodeEnvelope(killer));
        await redis.lpush(stage.keys.queue, ...items);
        const env = { BATCH_SIZE: "1000", MAX_CRASHES: "3", FAULT_CRASH_ON_NAME: crasher };
        let crashes = 0;
        const startedAt = Date.now();
        // A supervisor's job: restart the consumer whenever it dies.
        let consumer = await stage.consumer(env);
        const deadline = Date.now() + 40_000;
        while (Date.now() < deadline && (await redis.llen(stage.keys.dead)) === 0) {
          const status = await Promise.race([consumer.status, sleep(100).then(() => undefined)]);
          if (status === undefined) continue;
          assert.equal(status.code, 137, `the consumer died otherwise\n${stage.tails()}`);
          crashes++;
          consumer = await stage.consumer(env);
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
          `scenario 7 poison that crashes the consumer: ${crashes} crashes (restarted after each), ` +
            `buried after 3 deliveries, ${good.length} neighbours stored, ${verdict(report)}, ` +
            `all done in ${seconds(Date.now() - startedAt)} (drain ${seconds(drainMs)})`,
        );
      },
    );

    await step(
      t,
      "8 a full queue refuses the excess with 503 and loses nothing accepted",
      async () => {
        await using stage = await Stage.open(world);
        const api = await stage.server({ QUEUE_MAX_LENGTH: "2000" });
        const load = stage.load([api], "s8", { limit: 3_000 });
        const outcomes = await load.finished();
        const refused = outcomes.filter((o) => o.status === 503);
        assert.equal(outcomes.filter((o) => o.kind === "accepted").length, 2_000);
        assert.equal(refused.length, 1_000);
        const reasons = [
          ...new Set(refused.map((o) => `${o.detail} (Retry-After ${o.retryAfter})`)),
        ];
        assert.deepEqual(reasons, ["queue is full, retry later (Retry-After 1)"]);
        assert.equal(await redis.llen(stage.keys.queue), 2_000);
        const startedAt = Date.now();
        await stage.consumer();
        const drainMs = await stage.drain();
        // Room again: the same API accepts.
        const after = await stage.load([api], "s8-after", { limit: 10 }).finished();
        await stage.drain();
        const report = await stage.verify([...outcomes, ...after]);
        assert.equal(report.accepted, 2_010);
        await stage.stopAll();
        stage.summary(
          `scenario 8 queue at its bound (2000, no consumer): 3000 sent, 2000 accepted, ` +
            `1000 × 503 "queue is full" with Retry-After, ${verdict(report)}, drained ` +
            `${seconds(drainMs)} after a consumer started (${seconds(Date.now() - startedAt)})`,
        );
      },
    );

    await step(
      t,
      "9a SIGTERM to the API under load: in-flight requests finish, exit 0",
      async () => {
        await using stage = await Stage.open(world);
        // A 2 s Redis timeout, so requests can be held in flight by a short freeze.
        const api = await stage.server({ REDIS_TIMEOUT_MS: "2000" });
        await stage.consumer();
        const load = stage.load([api], "s9a");
        await sleep(1_000);
        redisServer.server.freeze();
        let inFlight: string[] = [];
        let status: Deno.CommandStatus;
        try {
          await sleep(200);
          inFlight = load.inFlightNames();
          signalService(api.process, "SIGTERM");
          const stopping = api.process.status;
          await sleep(300);
          redisServer.server.thaw();
          status = await stopping;
        } finally {
          redisServer.server.thaw();
        }
        await sleep(200);
        const outcomes = await load.stop();
        assert.ok(inFlight.length > 0, "inconclusive: no request in flight at SIGTERM");
        assert.equal(status.code, 0, stage.tails());
        const held = outcomes.filter((o) => inFlight.includes(o.name));
        const notAccepted = held.filter((o) => o.kind !== "accepted");
        assert.deepEqual(
          notAccepted.slice(0, 5),
          [],
          "every request in flight at SIGTERM gets its 202",
        );
        const drainMs = await stage.drain();
        const report = await stage.verify(outcomes);
        await stage.stopAll();
        stage.summary(
          `scenario 9a API SIGTERM: ${held.length} requests in flight (held by a Redis freeze) all ` +
            `answered 202, exit 0; ${answers(report)}, ${verdict(report)}, drained in ${
              seconds(drainMs)
            }`,
        );
      },
    );

    await step(
      t,
      "9b SIGTERM to a consumer mid-batch: it finishes the batch and exits 0",
      async () => {
        await using stage = await Stage.open(world);
        const good = envelopes(3_000, "s9b");
        await redis.lpush(stage.keys.queue, ...good.map(encodeEnvelope));
        // Frozen PostgreSQL: the first batch is fetched and held, its insert waiting.
        pg.server.freeze();
        let consumer: TaskProcess;
        let held: number;
        let status: Deno.CommandStatus;
        try {
          consumer = await stage.consumer({ BATCH_SIZE: "1000" });
          const key = stage.processingKey(consumer);
          await waitFor("a batch in hand", async () => (await redis.llen(key)) > 0);
          held = await redis.llen(key);
          signalService(consumer, "SIGTERM");
          await sleep(500);
        } finally {
          pg.server.thaw();
        }
        status = await consumer.status;
        assert.equal(status.code, 0, stage.tails());
        const count = await rowCount(sql);
        assert.equal(count, held, "the batch in hand was finished");
        assert.equal(await redis.llen(stage.keys.queue), good.length - held, "no new batch taken");
        assert.deepEqual(await stage.processingKeys(), []);

        // Hand-back: the shutdown deadline passes while PostgreSQL stays frozen.
        pg.server.freeze();
        let handedBack: number;
        try {
          consumer = await stage.consumer({ BATCH_SIZE: "1000", SHUTDOWN_TIMEOUT_MS: "500" });
          const key = stage.processingKey(consumer);
          await waitFor("a batch in hand", async () => (await redis.llen(key)) > 0);
          signalService(consumer, "SIGTERM");
          await waitFor(
            "the consumer to hand its batch back",
            () => consumer.output.some((l) => /stopped; \d+ items handed back/.test(l)),
            { timeoutMs: 10_000 },
          );
          handedBack = Number(
            /stopped; (\d+) items handed back/.exec(consumer.output.join("\n"))?.[1],
          );
        } finally {
          pg.server.thaw();
        }
        status = await consumer.status;
        assert.equal(status.code, 0, stage.tails());
        assert.ok(handedBack > 0, `inconclusive: nothing was handed back\n${stage.tails()}`);
        assert.equal(await redis.llen(stage.keys.queue), good.length - held);
        await stage.consumer();
        const drainMs = await stage.drain();
        const report = await stage.verify([], {
          injected: good.map(({ id, name }) => ({ id, name })),
        });
        await stage.stopAll();
        stage.summary(
          `scenario 9b consumer SIGTERM: with a ${held}-item batch in hand it finished it and exited 0; ` +
            `past its deadline it handed ${handedBack} back and exited 0; ${good.length} stored, ` +
            `${verdict(report)}, drained in ${seconds(drainMs)}`,
        );
      },
    );

    await step(
      t,
      "10 the bad-input catalogue: precise 4xx, nothing queued, still serving",
      async () => {
        await using stage = await Stage.open(world);
        const api = await stage.server();
        const cases = badInputs();
        const failures: string[] = [];
        for (const c of cases) {
          const response = await fetch(`${api.url}${c.path ?? "/users"}`, {
            method: c.method ?? "POST",
            headers: c.contentType === null
              ? {}
              : { "Content-Type": c.contentType ?? "application/json" },
            body: c.body,
          });
          const text = await response.text();
          let error: unknown;
          try {
            error = JSON.parse(text).error;
          } catch {
            error = undefined;
          }
          const queued = await redis.llen(stage.keys.queue);
          if (response.status !== c.status || typeof error !== "string" || queued !== 0) {
            failures.push(
              `${c.what}: ${response.status} ${text.slice(0, 100)} (queue length ${queued})`,
            );
          }
        }
        assert.deepEqual(failures, []);
        const after = await stage.load([api], "s10", { limit: 5, concurrency: 1 }).finished();
        assert.ok(after.every((o) => o.kind === "accepted"), "still answers 202");
        assert.equal(await redis.llen(stage.keys.queue), 5);
        await stage.stopAll();
        stage.summary(
          `scenario 10 bad input: ${cases.length} malformed requests each a precise 4xx with a JSON ` +
            `error, nothing queued, the API then accepts 5 of 5`,
        );
      },
    );

    await step(
      t,
      "control: the course's BRPOP consumer, SIGKILLed the same way, loses users",
      async () => {
        await using stage = await Stage.open(world);
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
            await sleep(300);
            await waitFor(
              "a backlog, so the consumer is busy",
              async () => (await redis.llen(stage.keys.queue)) > 0,
              { intervalMs: 5 },
            );
            consumer.kill("SIGKILL");
            kills++;
            await consumer.status;
            consumer = await stage.naiveConsumer();
          }
          outcomes.push(...await load.stop());
          await waitFor(
            "the naive consumer to empty the queue",
            async () => (await redis.llen(stage.keys.queue)) === 0,
          );
          await sleep(300);
          const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
          report = checkDelivery(outcomes, rows);
        }
        assert.ok(report);
        assert.ok(report.lost.length > 0, "the checker must catch the naive consumer's losses");
        assert.equal(report.unexpectedRows.length, 0);
        stage.summary(
          `control naive BRPOP consumer: ${
            answers(report)
          }, ${kills} SIGKILLs, lost ${report.lost.length} ` +
            `— the checker catches loss`,
        );
      },
    );
  } finally {
    redisServer.server.thaw();
    pg.server.thaw();
    redis.disconnect();
    await sql.end({ timeout: 1 });
    console.log(`\nfault suite summary (${seconds(Date.now() - started)}):`);
    for (const line of world.summaries) console.log(`  ${line}`);
  }
});

/**
 * Runs a scenario as a step, unless FAULT_ONLY (a comma-separated list of
 * scenario numbers such as `4b,5`) leaves it out: handy while working on one.
 */
function step(t: Deno.TestContext, name: string, fn: () => Promise<void>): Promise<boolean> {
  const only = Deno.env.get("FAULT_ONLY")?.split(",").map((s) => s.trim()).filter(Boolean);
  const id = name.split(" ")[0]!.replace(/:$/, "");
  const ignore = only !== undefined && only.length > 0 &&
    !only.some((wanted) => id === wanted || id.replace(/[a-z]$/, "") === wanted);
  return t.step({ name, fn, ignore });
}

function pgOptions(pg: TestPostgres) {
  return {
    host: pg.env.PGHOST,
    port: Number(pg.env.PGPORT),
    user: pg.env.PGUSER,
    password: pg.env.PGPASSWORD,
    database: pg.env.PGDATABASE,
  };
}

async function rowCount(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
  return row?.count ?? 0;
}

/** Sends `signal` to each of `pids` that still runs. */
function killAll(pids: readonly number[], signal: Deno.Signal): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/**
 * Signals the service a `deno task` runner started, not the runner: the way a
 * container's stop signals the service alone. (The runner would forward a
 * second SIGTERM, which can land while the service is already exiting.)
 */
function signalService(process: TaskProcess, signal: Deno.Signal): void {
  killAll(processTree(process.pid).filter((pid) => pid !== process.pid), signal);
}

/** A process and its descendants, descendants first. */
function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      // The command name in parentheses may contain spaces: ppid follows the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry.name)]);
    } catch {
      // exited while we looked
    }
  }
  const tree = (pid: number): number[] => [...(children.get(pid) ?? []).flatMap(tree), pid];
  return tree(root);
}

function avg(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * SIGKILLs the consumers in turn (restarting each at once) until `hits` kills
 * landed while the victim held a batch; waits for the victim to hold one
 * first, so few kills are wasted.
 */
async function killRepeatedly(
  stage: Stage,
  redis: Redis,
  consumers: TaskProcess[],
  env: Record<string, string>,
  { hits: wanted, gapMs = 400, maxAttempts = 20 }: {
    hits: number;
    gapMs?: number;
    maxAttempts?: number;
  },
) {
  let hits = 0;
  let attempts = 0;
  let heldTotal = 0;
  const recoveries: Promise<number>[] = [];
  for (
    let slot = 0;
    hits < wanted && attempts < maxAttempts;
    slot = (slot + 1) % consumers.length
  ) {
    attempts++;
    await sleep(gapMs);
    const victim = consumers[slot]!;
    const key = stage.processingKey(victim);
    // Read the process tree first: the kill must follow the check at once, or
    // the batch seen in hand is acknowledged before the signal lands.
    const pids = processTree(victim.pid);
    const until = Date.now() + 1_000;
    while (Date.now() < until && (await redis.llen(key)) === 0) await sleep(1);
    killAll(pids, "SIGKILL");
    const killedAt = Date.now();
    // Its heartbeat outlives it by at least 600 ms: what it held is still there.
    const held = await redis.llen(key);
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
  return {
    hits,
    attempts,
    heldTotal,
    recoveryAvgMs: avg(times),
    recoveryMaxMs: Math.max(...times),
  };
}

/** One malformed request and the answer it must get. */
interface BadInput {
  what: string;
  body?: BodyInit;
  /** null sends no Content-Type. @default application/json */
  contentType?: string | null;
  method?: string;
  path?: string;
  status: number;
}

function badInputs(): BadInput[] {
  const json = (what: string, body: string, status = 400): BadInput => ({ what, body, status });
  return [
    json("truncated JSON", '{"name": '),
    json("not JSON at all", "name=Ada"),
    json("empty body", ""),
    json("JSON array", '["Ada"]'),
    json("JSON string", '"Ada"'),
    json("JSON null", "null"),
    json("name is a number", '{"name": 5}'),
    json("name is null", '{"name": null}'),
    json("name is an array", '{"name": ["Ada"]}'),
    json("name is an object", '{"name": {"first": "Ada"}}'),
    json("name missing", "{}"),
    json("wrong field", '{"username": "Ada"}'),
    json("extra field", '{"name": "Ada", "admin": true}'),
    json("empty name", '{"name": ""}'),
    json("whitespace name", '{"name": " \\t\\n "}'),
    json("201-character name", JSON.stringify({ name: "x".repeat(201) })),
    json("NUL in the name", '{"name": "Ada\\u0000"}'),
    json("lone surrogate (escaped)", '{"name": "Ada \\ud800"}'),
    json("oversized body", JSON.stringify({ name: "x".repeat(20_000) }), 413),
    { what: "text/html", body: '{"name": "Ada"}', contentType: "text/html", status: 415 },
    {
      what: "application/xml",
      body: "<name>Ada</name>",
      contentType: "application/xml",
      status: 415,
    },
    {
      what: "multipart",
      body: '{"name": "Ada"}',
      contentType: "multipart/form-data; boundary=x",
      status: 415,
    },
    {
      what: "latin-1 charset",
      body: '{"name": "Ada"}',
      contentType: "application/json; charset=iso-8859-1",
      status: 415,
    },
    {
      what: "invalid UTF-8 bytes (an encoded surrogate)",
      body: new Uint8Array([
        ...new TextEncoder().encode('{"name": "Ada '),
        0xed,
        0xa0,
        0x80,
        0x22,
        0x7d,
      ]),
      status: 400,
    },
    { what: "PUT /users", method: "PUT", body: '{"name": "Ada"}', status: 405 },
    { what: "GET /users/not-a-uuid", method: "GET", path: "/users/not-a-uuid", status: 400 },
    { what: "unknown route", path: "/nope", body: '{"name": "Ada"}', status: 404 },
  ];
}
