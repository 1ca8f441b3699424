/**
 * The stage every fault scenario plays on (issue #3, "Nothing accepted is
 * ever lost"): the API and the consumers as real processes against a real
 * Redis and PostgreSQL on loopback, a load that remembers every request, and
 * the checks run after each scenario.
 *
 * Each test file (`fault_*_test.ts`, one per fault family) starts one Redis
 * and one PostgreSQL on first use and stops them after its last test; every
 * scenario is a `Deno.test` of its own ({@linkcode scenario}) with a fresh
 * queue name and an empty table, so `deno test --filter` runs any one alone.
 *
 * What a scenario is held to, besides what it checks itself:
 * - the promise, once drained: every request answered 202 is exactly one row
 *   of `users` under the id it was given (or, if it can never be stored, one
 *   dead letter with the reason); nothing rejected is stored, nothing is
 *   stored twice, every list is empty (`delivery_check.ts`);
 * - the answers: every request is valid, so each answer other than 202 must
 *   be explained by a fault the scenario caused, which it records with
 *   {@linkcode Stage.fault}; a hang never is, and indeterminate answers stay
 *   within the scenario's bound (`answer_check.ts`); and every answer, 202 or
 *   not, comes within its API's REDIS_TIMEOUT_MS and
 *   {@linkcode ANSWER_MARGIN_MS};
 * - the processes: a service that exits without the scenario having killed,
 *   stopped or crashed it on purpose ({@linkcode Stage.kill},
 *   {@linkcode Stage.signal}, {@linkcode Stage.expectEnd}) fails it, and every
 *   other one must exit 0 on SIGTERM at the end ({@linkcode Stage.stopAll}).
 *
 * A fault that hit nothing (a kill while no batch was in hand, an outage no
 * request saw) proves nothing, so scenarios check that their fault landed and
 * fail as inconclusive otherwise. Each prints one summary line with its
 * figures. Readiness, consumer ids, outages and hand-backs come from the
 * services' structured events (`service_events.ts`), never from log prose.
 *
 * @module
 */

import { RetryingClient } from "./retrying_client.ts";
import { PENDING_LISTS_SCRIPT, pendingFromReply } from "./pending_lists.ts";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import postgres from "postgres";
import { v7 as uuidv7 } from "uuid";
import {
  type DeadLetter,
  encodeEnvelope,
  type QueueKeys,
  queueKeys,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { withLoadTurn } from "@users-pipeline/harness/load_turn";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import {
  migrate,
  projectEnv,
  startPostgres,
  startRedis,
  type TestPostgres,
  type TestRedis,
} from "@users-pipeline/harness/services";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { type AnswerCheckOptions, checkAnswers, type Excuse, type Fault } from "./answer_check.ts";
import {
  checkDelivery,
  deliveryHeld,
  type DeliveryReport,
  describeProblems,
  type Injected,
} from "./delivery_check.ts";
import { LoadGenerator, type LoadOptions, type Outcome } from "./fault_load.ts";
import { type NaiveConsumer, startNaiveConsumer } from "./naive_consumer.ts";
import { postgresConnection } from "./postgres_client.ts";
import { currentConsumerId, hasEvent } from "./service_events.ts";

/** Timings short enough that recovery happens within a test (see the issue). */
export const FAST_ENV: Readonly<Record<string, string>> = {
  HEARTBEAT_TTL_MS: "1000",
  RECOVERY_INTERVAL_MS: "200",
  STATEMENT_TIMEOUT_MS: "2000",
  REDIS_TIMEOUT_MS: "500",
  RETRY_MAX_DELAY_MS: "500",
  BLOCK_TIMEOUT_SECONDS: "1",
  SHUTDOWN_TIMEOUT_MS: "10000",
};

/**
 * How much later than its API's REDIS_TIMEOUT_MS an answer may reach the test's client. README,
 * "Every answer is prompt": "The fault suite and the Redis Cluster tests hold every answer, 202 or
 * 503, to `REDIS_TIMEOUT_MS` plus 100 ms as their client times it: the API's timer and the
 * client's event loop may each fire late on a loaded 2-core machine."
 */
export const ANSWER_MARGIN_MS = 100;

/**
 * The README's bound on each answer, given each API's REDIS_TIMEOUT_MS by its URL: that timeout and
 * {@linkcode ANSWER_MARGIN_MS}. Both stages (this one and `cluster_stage.ts`) hold answers to it.
 */
export function answerBound(redisTimeouts: ReadonlyMap<string, number>): (o: Outcome) => number {
  return (outcome) => {
    const timeoutMs = redisTimeouts.get(outcome.url);
    if (timeoutMs === undefined) {
      throw new TypeError(
        `Cannot bound the answer from ${outcome.url} as no API there was started`,
      );
    }
    return timeoutMs + ANSWER_MARGIN_MS;
  };
}

/** Test clients' application_name, so terminating "every backend" spares the test itself. */
export const TEST_APP = "fault-suite";

/** The services a test file's scenarios share, and the test's own clients of them. */
export interface World {
  readonly redisServer: TestRedis;
  readonly pg: TestPostgres;
  /** A client of `redisServer` for the checks; it rides out Redis being killed. */
  readonly redis: Redis;
  /** A client of `pg`'s database, as application {@linkcode TEST_APP}. */
  readonly sql: postgres.Sql;
}

/** A running API replica. */
export interface Api {
  readonly process: TaskProcess;
  readonly url: string;
  readonly port: number;
}

/** Options of {@linkcode Stage.verify}. */
export interface VerifyOptions extends AnswerCheckOptions {
  /** Users pushed straight into Redis, expected stored under their id. */
  injected?: readonly Injected[];
  /** Exactly the payloads the dead letters must hold (any order). @default [] */
  deadPayloads?: readonly string[];
  /** Items allowed in the dead letters beyond `deadPayloads`, at most once each. */
  maybeDead?: readonly string[];
  /**
   * Names that may be stored (at most once) or not: pushed straight into
   * Redis, or answered 503 while their push may still have run.
   */
  mayStore?: readonly string[];
  /**
   * A client that retried every non-202 with its key beside the load: each
   * key that got a 202 must be stored exactly once under that id, and no key
   * given up (none may be). {@linkcode Stage.settle} stops it with the load.
   */
  keyed?: RetryingClient;
}

/** Options of {@linkcode scenario}. */
export interface ScenarioOptions {
  /**
   * Give the scenario a Redis of its own, started fresh and stopped after it,
   * for one whose fault would outlast it (a lowered maxmemory). @default false
   */
  ownRedis?: boolean;
}

/**
 * A scenario's settings for a service, over the stage's; `undefined` puts a
 * variable back to project.env's value, its documented default.
 */
export type EnvChanges = Readonly<Record<string, string | undefined>>;

/**
 * Registers a fault scenario as a test of its own: the file's services
 * (started on first use), a fresh {@linkcode Stage}, and its processes killed
 * afterwards whatever happened.
 */
export function scenario(
  name: string,
  fn: (stage: Stage) => Promise<void>,
  options: ScenarioOptions = {},
): void {
  Deno.test({
    name,
    // The file's Redis, PostgreSQL and clients outlive each test, and the
    // services are real processes whose pipes and timers span the scenarios.
    sanitizeOps: false,
    sanitizeResources: false,
  }, () =>
    // Each scenario drives load: it takes its turn with the Docker tests (load_turn.ts).
    withLoadTurn(name, async () => {
      const shared = await sharedWorld();
      await using own = options.ownRedis ? await startRedis() : undefined;
      const world = own === undefined
        ? shared
        : { ...shared, redisServer: own, redis: redisClient(own) };
      try {
        await using stage = await Stage.open(world);
        await fn(stage);
      } finally {
        if (world !== shared) world.redis.disconnect();
      }
    }));
}

let fileWorld: Promise<World & { close(): Promise<void> }> | undefined;

/** The test file's services, started on first use. */
function sharedWorld(): Promise<World> {
  fileWorld ??= openWorld();
  return fileWorld;
}

// Each test file runs in an isolate of its own, so this closes that file's services.
Deno.test.afterAll(async () => {
  await fileWorld?.then((world) => world.close(), () => {});
});

async function openWorld(): Promise<World & { close(): Promise<void> }> {
  await using stack = new AsyncDisposableStack();
  const redisServer = stack.use(await startRedis());
  const pg = stack.use(await startPostgres());
  await migrate(pg.env);
  const redis = redisClient(redisServer);
  const sql = postgres({
    ...postgresConnection(pg.env),
    max: 2,
    onnotice: () => {},
    connection: { application_name: TEST_APP },
  });
  const services = stack.move();
  return {
    redisServer,
    pg,
    redis,
    sql,
    close: async () => {
      redis.disconnect();
      await sql.end({ timeout: 1 });
      await services.disposeAsync();
    },
  };
}

function redisClient(server: TestRedis): Redis {
  const redis = new Redis(server.url);
  // Redis is killed on purpose; the commands retry, the events need no printing.
  redis.on("error", () => {});
  return redis;
}

/** A process the stage started, and what became of it. */
interface Tracked {
  readonly name: string;
  readonly output: readonly string[];
  readonly status: Promise<Deno.CommandStatus>;
  /** Sends a signal to the service itself, not to a task runner in between. */
  readonly signal: (signal: Deno.Signal) => void;
  /** SIGKILLs the process and what it started. */
  readonly kill: () => void;
  exit?: Deno.CommandStatus;
  /** Whether its end is the scenario's doing, and the scenario's to check. */
  endsOnPurpose: boolean;
}

/**
 * One scenario's queue (a fresh name), its processes (SIGKILLed on dispose if
 * still running), its faults and the checks.
 */
export class Stage implements AsyncDisposable {
  readonly keys: QueueKeys;
  readonly world: World;
  readonly #processes = new Map<object, Tracked>();
  readonly #faults: Fault[] = [];
  /** Each API's REDIS_TIMEOUT_MS by its URL (a replica restarted on the same port: the longest). */
  readonly #redisTimeouts = new Map<string, number>();
  static #counter = 0;

  private constructor(world: World) {
    this.world = world;
    this.keys = queueKeys(`fault${++Stage.#counter}`);
  }

  /**
   * A fresh queue and an empty table; first undoes whatever a failed scenario
   * may have left (a frozen or stopped server).
   */
  static async open(world: World): Promise<Stage> {
    const { redisServer, pg } = world;
    redisServer.server.thaw();
    pg.server.thaw();
    if (redisServer.server.pid === undefined) await redisServer.server.start();
    if (pg.server.pid === undefined) await pg.server.start();
    await world.sql`truncate users`;
    return new Stage(world);
  }

  /**
   * A service's settings: every variable of project.env (so none comes from
   * the shell that runs the tests), the stage's servers and queue,
   * {@linkcode FAST_ENV}, then `changes`.
   *
   * @throws {TypeError} when `changes` resets a variable project.env lacks.
   */
  env(changes: EnvChanges = {}): Record<string, string> {
    const defaults = projectEnv();
    const env: Record<string, string> = {
      ...defaults,
      ...this.world.pg.env,
      REDIS_URL: this.world.redisServer.url,
      QUEUE_NAME: this.keys.queue,
      ...FAST_ENV,
    };
    for (const [name, value] of Object.entries(changes)) {
      const setting = value ?? defaults[name];
      if (setting === undefined) {
        throw new TypeError(`Cannot reset ${name} to its default as project.env does not set it`);
      }
      env[name] = setting;
    }
    return env;
  }

  /** Starts an API replica (on `port` if given) and waits until it is ready (`/readyz`). */
  async server(changes: EnvChanges = {}, port: number = freePort()): Promise<Api> {
    const env = this.env({ PORT: String(port), ...changes });
    const process = new TaskProcess("server", env, `server:${port}`);
    const tracked = this.#trackTask(process);
    const url = `http://127.0.0.1:${port}`;
    const timeoutMs = Number(env.REDIS_TIMEOUT_MS);
    this.#redisTimeouts.set(url, Math.max(timeoutMs, this.#redisTimeouts.get(url) ?? 0));
    await waitForHttp(`${url}/readyz`, {
      alive: () => tracked.exit === undefined,
      timeoutMs: 20_000,
    });
    return { process, url, port };
  }

  /**
   * Starts a consumer (its /readyz on a free port) and waits until it
   * registered (its `consumer_started` event, which names its id) and its
   * `/readyz` answers 200. One that ends after registering (a crash the
   * scenario injected) is returned as it is: the scenario checks its end,
   * and an end it did not expect fails the scenario anyway.
   */
  consumer(changes: EnvChanges = {}): Promise<TaskProcess> {
    return this.#consumer("consumer", changes);
  }

  /**
   * Starts the consumer with the suite's crash points (`crashing_consumer.ts`,
   * told where to crash by FAULT_CRASH_AT or FAULT_CRASH_ON_NAME in
   * `changes`) as {@linkcode consumer} starts the product's.
   */
  crashingConsumer(changes: EnvChanges): Promise<TaskProcess> {
    return this.#consumer("crashing-consumer", changes);
  }

  async #consumer(
    task: "consumer" | "crashing-consumer",
    changes: EnvChanges,
  ): Promise<TaskProcess> {
    const port = freePort();
    const process = new TaskProcess(
      task,
      this.env({ PORT: String(port), ...changes }),
      this.#nextName("consumer"),
    );
    const tracked = this.#trackTask(process);
    await this.#ready(tracked, "consumer_started");
    try {
      await waitForHttp(`http://127.0.0.1:${port}/readyz`, {
        alive: () => tracked.exit === undefined,
        timeoutMs: 20_000,
      });
    } catch (error) {
      if (tracked.exit !== undefined) return process;
      throw new Error(`${tracked.name} did not get ready: ${error}\n${this.tails()}`, {
        cause: error,
      });
    }
    return process;
  }

  /** Starts the course's BRPOP consumer and waits until it said it is ready. */
  async naiveConsumer(): Promise<NaiveConsumer> {
    const process = startNaiveConsumer(this.env());
    const tracked = this.#track(process, {
      name: this.#nextName("naive"),
      output: process.output,
      status: process.status,
      signal: (signal) => process.kill(signal),
      kill: () => process.kill("SIGKILL"),
    });
    await this.#ready(tracked, "naive_consumer_started");
    return process;
  }

  /**
   * Marks `process` as one whose end is the scenario's doing (a crash it
   * injected, a kill it sends itself): its exit no longer fails the scenario,
   * and the scenario checks its status.
   */
  expectEnd(process: TaskProcess | NaiveConsumer): void {
    this.#tracked(process).endsOnPurpose = true;
  }

  /** Sends `signal` to the service `process` runs, as a container stop does; its end is expected. */
  signal(process: TaskProcess | NaiveConsumer, signal: Deno.Signal): void {
    this.expectEnd(process);
    this.#tracked(process).signal(signal);
  }

  /** SIGKILLs `process` and everything it started; its end is expected. */
  kill(process: TaskProcess | NaiveConsumer): void {
    this.expectEnd(process);
    this.#tracked(process).kill();
  }

  /**
   * Fails when a process exited that the scenario did not kill, stop or
   * crash on purpose: a surviving replica must not hide a crash.
   */
  assertRunning(): void {
    const ended = [...this.#processes.values()].filter((p) => p.exit && !p.endsOnPurpose);
    if (ended.length === 0) return;
    const which = ended.map((p) => `${p.name} (exit ${p.exit!.code}, ${p.exit!.signal})`);
    throw new Error(`exited by itself during the scenario: ${which.join(", ")}\n${this.tails()}`);
  }

  /**
   * Records a fault the scenario causes from now until the returned function
   * is called, plus `graceMs` for the services to notice it ended: requests
   * overlapping it may get the answers `excuses` names.
   */
  fault(what: string, excuses: readonly Excuse[], { graceMs = 1_000 } = {}): () => void {
    const i = this.#faults.push({ what, from: Date.now(), to: Infinity, excuses }) - 1;
    return () => {
      this.#faults[i] = { ...this.#faults[i]!, to: Date.now() + graceMs };
    };
  }

  /** Starts a load generator against `apis`. */
  load(
    apis: readonly Api[],
    prefix: string,
    options: Omit<LoadOptions, "urls" | "prefix"> = {},
  ): LoadGenerator {
    return new LoadGenerator({ urls: apis.map((api) => api.url), prefix, ...options }).start();
  }

  /**
   * Starts a {@linkcode RetryingClient} on `apis`: `ratePerSecond` new users,
   * each retried with its Idempotency-Key until it gets its 202.
   */
  retrying(apis: readonly Api[], prefix: string, ratePerSecond = 100): RetryingClient {
    return new RetryingClient({ urls: apis.map((api) => api.url), prefix, ratePerSecond }).start();
  }

  /** The processing list of the consumer `consumer` now runs as (from its events). */
  processingKey(consumer: TaskProcess): string {
    const id = currentConsumerId(consumer.output);
    assert.ok(id, `no consumer_started event in the output of ${consumer.name}\n${this.tails()}`);
    return this.keys.processingPrefix + id;
  }

  /** Every processing list of this queue that holds items, live consumers or not. */
  async processingKeys(): Promise<string[]> {
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await this.world.redis.scan(
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

  /**
   * The main, the retry and every processing list that holds items, with their lengths: what is
   * not stored yet, read atomically (see `pending_lists.ts`).
   */
  async #lists(): Promise<Map<string, number>> {
    const reply = await this.world.redis.eval(
      PENDING_LISTS_SCRIPT,
      2,
      this.keys.queue,
      this.keys.retry,
      `${this.keys.processingPrefix}*`,
    ) as (string | number)[];
    return pendingFromReply(reply);
  }

  /** Items queued, waiting for a retry or held by a consumer: not stored yet. */
  async pending(): Promise<number> {
    return [...(await this.#lists()).values()].reduce((a, b) => a + b, 0);
  }

  /**
   * Waits until the main, retry and every processing list are empty; returns
   * the ms it took. Fails at once when a service exits by itself meanwhile.
   */
  async drain(timeoutMs = 60_000): Promise<number> {
    let last = "";
    return await waitFor(
      () => `queue ${this.keys.queue} to drain (${last})\n${this.tails(30)}`,
      async () => {
        this.assertRunning();
        const lists = await this.#lists();
        last = [...lists].map(([key, length]) => `${key}: ${length}`).join(", ");
        return [...lists.values()].every((length) => length === 0);
      },
      { timeoutMs, intervalMs: 100 },
    );
  }

  /**
   * The backlog now, and how long the consumers take to bring it under 200
   * items while the load goes on: the recovery time after an outage.
   */
  async catchUp(): Promise<{ backlog: number; ms: number }> {
    const backlog = await this.pending();
    const ms = await waitFor("the consumers to catch up", async () => {
      this.assertRunning();
      return (await this.pending()) < 200;
    }, { timeoutMs: 60_000, intervalMs: 20 });
    return { backlog, ms };
  }

  /** The dead letters, parsed. */
  async deadLetters(): Promise<DeadLetter[]> {
    const raw = await this.world.redis.lrange(this.keys.dead, 0, -1);
    return raw.map((entry) => JSON.parse(entry) as DeadLetter);
  }

  /**
   * Every answer other than 202 is explained by one of the scenario's faults,
   * no request hung, the indeterminate ones stay within the bound, and every
   * answer came within its API's REDIS_TIMEOUT_MS and
   * {@linkcode ANSWER_MARGIN_MS} (unless `answerWithinMs` says otherwise).
   */
  assertAnswers(outcomes: readonly Outcome[], options: AnswerCheckOptions = {}): void {
    const { problems } = checkAnswers(outcomes, this.#faults, {
      ...options,
      answerWithinMs: options.answerWithinMs ?? answerBound(this.#redisTimeouts),
    });
    assert.ok(problems.length === 0, `answers no fault explains:\n  ${problems.join("\n  ")}`);
  }

  /**
   * Settles, once drained, every refusal that named an id (a 503 whose push
   * may have run): `GET /users/{id}` on `api` must say `stored` for an id in
   * the table and 404 for one that is not, as the README's delivery contract
   * tells clients to settle it. Returns how many settled each way.
   */
  async assertSettled(
    api: Api,
    outcomes: readonly Outcome[],
  ): Promise<{ stored: number; never: number }> {
    const named = outcomes.filter((o) => o.kind === "rejected" && o.id !== undefined);
    const ids = named.map((o) => o.id!);
    const rows = ids.length === 0 ? [] : await this.world.sql<{ id: string }[]>`
      select id::text from users where id in ${this.world.sql(ids)}`;
    const inTable = new Set(rows.map((row) => row.id));
    const wrong: string[] = [];
    for (let i = 0; i < ids.length; i += 32) {
      await Promise.all(
        ids.slice(i, i + 32).map(async (id) => {
          const response = await fetch(`${api.url}/users/${id}`);
          const body = await response.json().catch(() => undefined);
          const said = response.status === 404
            ? "never queued"
            : `${response.status} ${body?.status}`;
          const expected = inTable.has(id) ? "200 stored" : "never queued";
          if (said !== expected) wrong.push(`${id}: ${said}, the table says ${expected}`);
        }),
      );
    }
    assert.deepEqual(wrong.slice(0, 5), [], `${wrong.length} of ${ids.length} 503s settle wrongly`);
    return { stored: inTable.size, never: ids.length - inTable.size };
  }

  /**
   * The promise, once drained: nothing lost, doubled or invented, no
   * forbidden or unexplained answer, the dead letters exactly as expected,
   * every list empty, no service ended by itself.
   */
  async verify(outcomes: readonly Outcome[], options: VerifyOptions = {}): Promise<DeliveryReport> {
    const { sql, redis } = this.world;
    this.assertRunning();
    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    const keyed = options.keyed?.users ?? [];
    const report = checkDelivery(outcomes, rows, {
      ...options,
      injected: [
        ...options.injected ?? [],
        ...keyed.flatMap(({ name, id }) => id === undefined ? [] : [{ name, id }]),
      ],
    });
    if (options.keyed !== undefined) {
      const problems = options.keyed.settled(rows);
      assert.deepEqual(problems.slice(0, 5), [], `${problems.length} keys not stored exactly once`);
      const gaveUp = keyed.filter((user) => user.gaveUp).map((user) => user.key);
      assert.deepEqual(gaveUp.slice(0, 5), [], `${gaveUp.length} keys given up without a 202`);
    }
    const letters = await this.deadLetters();
    if (!deliveryHeld(report)) {
      const reasons = new Map<string, number>();
      for (const { reason } of letters) reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
      const buried = [...reasons].map(([reason, n]) => `${n} × ${reason}`).join("; ");
      assert.fail(
        `${describeProblems(report)}\ndead letters: ${buried || "none"}\n${this.tails()}`,
      );
    }
    this.assertAnswers(outcomes, options);

    const dead = letters.map((letter) => letter.payload);
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
    // The status index moves with the items: once every list is empty, no user is still queued.
    assert.equal(
      await redis.scard(this.keys.queuedIds),
      0,
      "users left queued in the status index",
    );
    return report;
  }

  /**
   * Ends a scenario's load: stops it, waits for the queue to drain and
   * {@linkcode verify}s what it got.
   */
  async settle(
    load: LoadGenerator,
    options: VerifyOptions = {},
  ): Promise<{ outcomes: Outcome[]; drainMs: number; report: DeliveryReport }> {
    const [outcomes] = await Promise.all([load.stop(), options.keyed?.stop()]);
    const drainMs = await this.drain();
    const report = await this.verify(outcomes, options);
    return { outcomes, drainMs, report };
  }

  /**
   * Fails if a service ended by itself, then stops every process still
   * running with SIGTERM and checks that each exits 0 within 20 s.
   */
  async stopAll(): Promise<void> {
    this.assertRunning();
    const running = [...this.#processes.values()].filter((p) => p.exit === undefined);
    for (const process of running) process.signal("SIGTERM");
    const failures = await Promise.all(running.map(async (process) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), 20_000);
      });
      const status = await Promise.race([process.status, late]);
      clearTimeout(timer);
      if (status === undefined) return `${process.name} still runs 20 s after SIGTERM`;
      return status.code === 0
        ? undefined
        : `${process.name} exited ${status.code} (${status.signal})`;
    }));
    const failed = failures.filter((failure) => failure !== undefined);
    assert.ok(failed.length === 0, `${failed.join("; ")}\n${this.tails()}`);
  }

  /**
   * Sends SIGTERM to each of `processes` at once, as a container stop does,
   * and returns how each ended and how long after the signal; one still
   * running after `limitMs` (compose's grace period) is `undefined`.
   */
  async sigterm(
    processes: readonly TaskProcess[],
    limitMs = 30_000,
  ): Promise<{ name: string; code: number | undefined; ms: number }[]> {
    const sentAt = Date.now();
    for (const process of processes) this.signal(process, "SIGTERM");
    return await Promise.all(processes.map(async (process) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), limitMs);
      });
      const status = await Promise.race([process.status, late]);
      clearTimeout(timer);
      return { name: process.name, code: status?.code, ms: Date.now() - sentAt };
    }));
  }

  /** The last lines of every process, for failure messages. */
  tails(lines = 15): string {
    return [...this.#processes.values()]
      .map((p) => `--- ${p.name}\n${p.output.slice(-lines).join("\n")}`)
      .join("\n");
  }

  /** Prints the scenario's summary line. */
  summary(line: string): void {
    console.log(line);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    const processes = [...this.#processes.values()];
    for (const process of processes) if (process.exit === undefined) process.kill();
    await Promise.allSettled(processes.map((process) => process.status));
  }

  #trackTask(process: TaskProcess): Tracked {
    return this.#track(process, {
      name: process.name,
      output: process.output,
      status: process.status,
      signal: (signal) => signalService(process, signal),
      // The runner and the service: a kill must not leave the service behind.
      kill: () => process.kill("SIGKILL"),
    });
  }

  #track(key: object, process: Omit<Tracked, "endsOnPurpose">): Tracked {
    const tracked: Tracked = { ...process, endsOnPurpose: false };
    process.status.then((status) => {
      tracked.exit = status;
    }, () => {});
    this.#processes.set(key, tracked);
    return tracked;
  }

  /** `consumer-1`, `consumer-2`…: names that tell the stage's processes apart in failure output. */
  #nextName(kind: string): string {
    const same = [...this.#processes.values()].filter((p) => p.name.startsWith(`${kind}-`));
    return `${kind}-${same.length + 1}`;
  }

  #tracked(process: object): Tracked {
    const tracked = this.#processes.get(process);
    if (tracked === undefined) {
      throw new TypeError("Cannot find a process this stage did not start");
    }
    return tracked;
  }

  async #ready(process: Tracked, event: string): Promise<void> {
    await waitFor(() => `${process.name} to be ready (${event})\n${this.tails()}`, () => {
      if (hasEvent(process.output, event)) return true;
      if (process.exit !== undefined) {
        throw new Error(
          `${process.name} exited ${process.exit.code} before it was ready\n${this.tails()}`,
        );
      }
      return false;
    }, { timeoutMs: 20_000 });
  }
}

/**
 * The consumer's deadlines as project.env sets them (SHUTDOWN_TIMEOUT_MS,
 * STATEMENT_TIMEOUT_MS), instead of FAST_ENV's: what compose's 30 s grace
 * period must fit.
 */
export const PRODUCTION_DEADLINES: EnvChanges = {
  SHUTDOWN_TIMEOUT_MS: undefined,
  STATEMENT_TIMEOUT_MS: undefined,
};

/**
 * Waits until `count` of `consumers` hold a batch in their processing list
 * and returns how many items each holds.
 */
export async function waitForHolders(
  stage: Stage,
  consumers: readonly TaskProcess[],
  count: number,
): Promise<number[]> {
  let held: number[] = [];
  await waitFor(() => `${count} consumers to hold a batch (${held.join(", ")})`, async () => {
    held = await Promise.all(
      consumers.map((consumer) => stage.world.redis.llen(stage.processingKey(consumer))),
    );
    return held.filter((n) => n > 0).length === count;
  }, { timeoutMs: 20_000 });
  return held;
}

/**
 * The stage of the stop-during-an-outage scenarios: three consumers at the
 * {@linkcode PRODUCTION_DEADLINES}, then 1000 users queued while PostgreSQL
 * is frozen, so two consumers hold a batch of 500 each, their inserts
 * waiting, and the third waits for items. PostgreSQL is left frozen: the
 * caller thaws it (a failed scenario's is thawed by the next one).
 */
export async function twoHoldingOneIdle(stage: Stage, prefix: string) {
  const { consumers, shutdownMs } = await threeConsumers(stage);
  const users = envelopes(1_000, prefix);
  stage.world.pg.server.freeze();
  await stage.world.redis.lpush(stage.keys.queue, ...users.map(encodeEnvelope));
  const held = await waitForHolders(stage, consumers, 2);
  return { consumers, users, held, shutdownMs };
}

/**
 * {@linkcode twoHoldingOneIdle}, but the inserts wait on a lock the test holds on table `users`
 * instead of on a frozen server, so the test sees both inserts arrive (in `pg_stat_activity`)
 * before it goes on: a consumer whose items are in its processing list may not have read the
 * fetch's reply yet, and a stop then gives that fetch up instead of finishing a batch in hand
 * (on a busy machine, a consumer started shortly before its SIGTERM). `unlock` lets the
 * inserts commit.
 */
export async function twoInsertingOneIdle(stage: Stage, prefix: string) {
  const { consumers, shutdownMs } = await threeConsumers(stage);
  const users = envelopes(1_000, prefix);
  const { sql, redis } = stage.world;
  const locker = await sql.reserve();
  await locker`begin`;
  await locker`lock table users in access exclusive mode`;
  const unlock = async () => {
    await locker`commit`;
    locker.release();
  };
  try {
    await redis.lpush(stage.keys.queue, ...users.map(encodeEnvelope));
    const held = await waitForHolders(stage, consumers, 2);
    let waiting = 0;
    await waitFor(() => `2 inserts to wait on the table's lock (${waiting})`, async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where wait_event_type = 'Lock' and query ~ '^\\s*insert into users'`;
      waiting = row!.n;
      return waiting === 2;
    }, { timeoutMs: 20_000 });
    return { consumers, users, held, shutdownMs, unlock };
  } catch (error) {
    await unlock();
    throw error;
  }
}

async function threeConsumers(stage: Stage) {
  const shutdownMs = Number(stage.env(PRODUCTION_DEADLINES).SHUTDOWN_TIMEOUT_MS);
  const env = { ...PRODUCTION_DEADLINES, BATCH_SIZE: "500" };
  const consumers = [
    await stage.consumer(env),
    await stage.consumer(env),
    await stage.consumer(env),
  ];
  return { consumers, shutdownMs };
}

/**
 * Starts a fresh consumer, waits for the queue to drain, and verifies that
 * every one of `users` was stored once: whatever stopped consumers held is
 * recovered once their heartbeats expire.
 */
export async function drainAndVerify(stage: Stage, users: readonly UserEnvelope[]) {
  await stage.consumer();
  const drainMs = await stage.drain();
  const report = await stage.verify([], {
    injected: users.map(({ id, name }) => ({ id, name })),
  });
  return { drainMs, report };
}

/** Fails unless every process exited 0 within its time (see {@linkcode Stage.sigterm}). */
export function assertCleanExits(
  stage: Stage,
  exits: readonly { name: string; code: number | undefined; ms: number }[],
): void {
  const bad = exits.filter((exit) => exit.code !== 0);
  assert.deepEqual(
    bad.map(({ name, code }) =>
      `${name}: ${code === undefined ? "still running" : `exit ${code}`}`
    ),
    [],
    `every consumer exits 0 within compose's 30 s after SIGTERM\n${stage.tails(30)}`,
  );
}

/** How each consumer ended, e.g. `consumer-1 (500 in hand) exit 0 after 22.3 s`. */
export function describeExits(
  exits: readonly { name: string; code: number | undefined; ms: number }[],
  held: readonly number[],
): string {
  return exits.map((exit, i) =>
    `${exit.name} (${held[i] ? `${held[i]} in hand` : "idle"}) exit ${exit.code} after ` +
    seconds(exit.ms)
  ).join(", ");
}

/** What a retrying client's users cost and got, for a scenario's summary. */
export function keyedSummary(client: RetryingClient): string {
  const done = client.users.filter((user) => user.id !== undefined).length;
  return `keyed client: ${done} of ${client.users.length} keys 202 after ${client.tries} tries, ` +
    `each stored once under its id`;
}

/** `accepted, refused, indeterminate` as a phrase. */
export function answers(report: DeliveryReport): string {
  const parts = [`${report.accepted} accepted`];
  if (report.rejected > 0) parts.push(`${report.rejected} refused`);
  if (report.indeterminate > 0) {
    parts.push(`${report.indeterminate} indeterminate (${report.indeterminateStored} stored)`);
  }
  return parts.join(", ");
}

/** What the delivery check found, as a phrase. */
export function verdict(report: DeliveryReport): string {
  return `lost ${report.lost.length}, dup ${report.duplicated.length}, ` +
    `unexpected rows ${report.unexpectedRows.length}`;
}

/** The refusals by status and reason, e.g. `503 queue is full × 1000`. */
export function refusals(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) {
    if (o.kind !== "rejected") continue;
    const key = `${o.status} ${o.detail}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([key, n]) => `${key} × ${n}`).join("; ") || "none refused";
}

/** Envelopes as the API would queue them. */
export function envelopes(count: number, prefix: string): UserEnvelope[] {
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: `${prefix}-${i}`,
    enqueued_at: Date.now(),
  }));
}

/** Rows of `users`. */
export async function rowCount(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
  return row?.count ?? 0;
}

/** `ms` as seconds with one decimal: `1.5 s`. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** The mean of `values`, 0 for none. */
export function avg(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}

/** Sends `signal` to each of `pids` that still runs. */
export function killAll(pids: readonly number[], signal: Deno.Signal): void {
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
export function processTree(root: number): number[] {
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
