/**
 * The stage every fault and cluster scenario plays on: the API and the consumers as real
 * processes (`deno task server`, `deno task consumer`) against a real PostgreSQL and the Redis of
 * a {@linkcode Topology} (one server, or a cluster of 3 masters and 3 replicas) on loopback, a
 * load that remembers every request (`fault_load.ts`), the faults the scenario records, and the
 * checks run after it (`stage_verify.ts`).
 *
 * What a scenario is held to, besides what it checks itself:
 * - the promise, once drained ({@linkcode Stage.verify});
 * - the answers: every request is valid, so each answer other than 202 must be explained by a
 *   fault the scenario caused, which it records with {@linkcode Stage.fault}; a hang never is,
 *   and indeterminate answers stay within the scenario's bound (`answer_check.ts`); and every
 *   answer, 202 or not, comes within its API's REDIS_TIMEOUT_MS and `ANSWER_MARGIN_MS`; each try
 *   of the keyed client ({@linkcode Stage.retrying}) as well, and at least one of them must have
 *   met a fault;
 * - the processes: a service that exits without the scenario having killed, stopped or crashed
 *   it on purpose ({@linkcode Stage.kill}, {@linkcode Stage.signal}, {@linkcode Stage.expectEnd})
 *   fails it, and every other one must exit 0 on SIGTERM at the end ({@linkcode Stage.stopAll}).
 *
 * A fault that hit nothing (a kill while no batch was in hand, an outage no request saw) proves
 * nothing, so scenarios check that their fault landed and fail as inconclusive otherwise.
 * Readiness, consumer ids, outages and hand-backs come from the services' structured events
 * (`service_events.ts`), never from log prose.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { DeadLetter, QueueKeys } from "@users-pipeline/queue";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { type AnswerCheckOptions, checkAnswers, type Excuse, type Fault } from "./answer_check.ts";
import { LoadGenerator, type LoadOptions, type Outcome } from "./fault_load.ts";
import { type NaiveConsumer, startNaiveConsumer } from "./naive_consumer.ts";
import { pendingLists } from "./pending_lists.ts";
import { type Exit, ProcessRoster, type Tracked } from "./process_roster.ts";
import { RetryingClient } from "./retrying_client.ts";
import { currentConsumerId } from "./service_events.ts";
import { answerBound, type EnvChanges, serviceEnv } from "./service_env.ts";
import {
  assertSettled,
  type StageReport,
  verifyDelivery,
  type VerifyOptions,
} from "./stage_verify.ts";
import type { Topology } from "./topology.ts";
import type { World } from "./world.ts";

/** A running API replica. */
export interface Api {
  readonly process: TaskProcess;
  readonly url: string;
  readonly port: number;
}

/** Options of {@linkcode Stage.consumer}. */
export interface ConsumerOptions {
  /** Return once it registered, before its `/readyz` (which needs PostgreSQL) answers. @default false */
  registeredOnly?: boolean;
}

/**
 * One scenario's queue (a fresh name over the topology's shards), its processes (SIGKILLed on
 * dispose if still running), its faults and the checks.
 */
export class Stage<T extends Topology = Topology> implements AsyncDisposable {
  readonly world: World<T>;
  /** QUEUE_NAME of the scenario's services. */
  readonly queueName: string;
  /** Every shard's keys, shard 0 first. */
  readonly shards: readonly QueueKeys[];
  readonly #roster = new ProcessRoster();
  readonly #faults: Fault[] = [];
  /** Each API's REDIS_TIMEOUT_MS by its URL (a replica restarted on the same port: the longest). */
  readonly #redisTimeouts = new Map<string, number>();
  static #counter = 0;

  private constructor(world: World<T>, shards: number) {
    this.world = world;
    this.queueName = `${world.topology.queuePrefix}${++Stage.#counter}`;
    this.shards = world.topology.shards(this.queueName, shards);
  }

  /**
   * A fresh queue over `shards` shards and an empty table; first undoes whatever a failed
   * scenario may have left (a frozen or stopped server).
   */
  static async open<T extends Topology>(world: World<T>, shards = 1): Promise<Stage<T>> {
    world.pg.server.thaw();
    if (world.pg.server.pid === undefined) await world.pg.server.start();
    await world.topology.heal();
    await world.sql`truncate users`;
    return new Stage(world, shards);
  }

  /** Shard 0's keys: the whole queue when it has one shard. */
  get keys(): QueueKeys {
    return this.shards[0]!;
  }

  /**
   * A service's settings: project.env, the stage's PostgreSQL, Redis and queue, `FAST_ENV`, then
   * each of `changes` in turn (`serviceEnv`).
   */
  env(...changes: EnvChanges[]): Record<string, string> {
    return serviceEnv({
      ...this.world.pg.env,
      ...this.world.topology.env(),
      QUEUE_NAME: this.queueName,
      QUEUE_SHARDS: String(this.shards.length),
    }, ...changes);
  }

  /**
   * Starts an API replica (on `port` if given) with the topology's API settings, then `changes`,
   * and waits until it is ready (`/readyz`).
   */
  async server(changes: EnvChanges = {}, port: number = freePort()): Promise<Api> {
    const env = this.env({ PORT: String(port) }, this.world.topology.apiChanges, changes);
    const process = new TaskProcess("server", env, `server:${port}`);
    const tracked = this.#roster.addTask(process);
    const url = `http://127.0.0.1:${port}`;
    const timeoutMs = Number(env.REDIS_TIMEOUT_MS);
    this.#redisTimeouts.set(url, Math.max(timeoutMs, this.#redisTimeouts.get(url) ?? 0));
    await this.#readyz(tracked, url);
    return { process, url, port };
  }

  /**
   * Starts a consumer (its /readyz on a free port) and waits until it registered (its
   * `consumer_started` event, which names its id) and, unless `registeredOnly`, its `/readyz`
   * answers 200. One that ends after registering (a crash the scenario injected) is returned as
   * it is: the scenario checks its end, and an end it did not expect fails the scenario anyway.
   */
  consumer(changes: EnvChanges = {}, options: ConsumerOptions = {}): Promise<TaskProcess> {
    return this.#consumer("consumer", changes, options);
  }

  /**
   * Starts the consumer with the suite's crash points (`crashing_consumer.ts`, told where to
   * crash by FAULT_CRASH_AT or FAULT_CRASH_ON_NAME in `changes`) as {@linkcode consumer} starts
   * the product's.
   */
  crashingConsumer(changes: EnvChanges): Promise<TaskProcess> {
    return this.#consumer("crashing-consumer", changes);
  }

  async #consumer(
    task: "consumer" | "crashing-consumer",
    changes: EnvChanges,
    { registeredOnly = false }: ConsumerOptions = {},
  ): Promise<TaskProcess> {
    const port = freePort();
    const env = this.env({ PORT: String(port), ...changes });
    const process = new TaskProcess(task, env, this.#roster.nextName("consumer"));
    const tracked = this.#roster.addTask(process);
    await this.#ready(tracked, "consumer_started");
    if (!registeredOnly) await this.#readyz(tracked, `http://127.0.0.1:${port}`, { endOk: true });
    return process;
  }

  /** Starts the course's BRPOP consumer and waits until it said it is ready. */
  async naiveConsumer(): Promise<NaiveConsumer> {
    const process = startNaiveConsumer(this.env());
    const tracked = this.#roster.add(process, {
      name: this.#roster.nextName("naive"),
      output: process.output,
      status: process.status,
      signal: (signal) => process.kill(signal),
      kill: () => process.kill("SIGKILL"),
    });
    await this.#ready(tracked, "naive_consumer_started");
    return process;
  }

  /**
   * Marks `process` as one whose end is the scenario's doing (a crash it injected, a kill it
   * sends itself): its exit no longer fails the scenario, and the scenario checks its status.
   */
  expectEnd(process: TaskProcess | NaiveConsumer): void {
    this.#roster.get(process).endsOnPurpose = true;
  }

  /** Sends `signal` to the service `process` runs, as a container stop does; its end is expected. */
  signal(process: TaskProcess | NaiveConsumer, signal: Deno.Signal): void {
    this.expectEnd(process);
    this.#roster.get(process).signal(signal);
  }

  /** SIGKILLs `process` and everything it started (one signal to its group); its end is expected. */
  kill(process: TaskProcess | NaiveConsumer): void {
    this.expectEnd(process);
    this.#roster.get(process).kill();
  }

  /**
   * Fails when a process exited that the scenario did not kill, stop or crash on purpose: a
   * surviving replica must not hide a crash.
   */
  assertRunning(): void {
    this.#roster.assertNoneEnded(() => this.tails());
  }

  /**
   * Records a fault the scenario causes from now (or `from`, for one known only once it ended)
   * until the returned function is called, plus `graceMs` for the services to notice it ended:
   * requests overlapping it may get the answers `excuses` names; with `shards`, only requests
   * whose id is of one of those shards (a master serving them failed, say).
   */
  fault(
    what: string,
    excuses: readonly Excuse[],
    { graceMs = 1_000, from = Date.now(), shards }: {
      graceMs?: number;
      from?: number;
      shards?: ReadonlySet<number>;
    } = {},
  ): () => void {
    const scope = shards === undefined ? {} : { shards: { of: shards, count: this.shards.length } };
    const i = this.#faults.push({ what, from, to: Infinity, excuses, ...scope }) - 1;
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
   * Starts a {@linkcode RetryingClient} on `apis`: `ratePerSecond` new keys (a user each, or a
   * batch of `batchSize`), each retried with its Idempotency-Key until it gets its 202.
   */
  retrying(
    apis: readonly Api[],
    prefix: string,
    { ratePerSecond = 100, batchSize }: { ratePerSecond?: number; batchSize?: number } = {},
  ): RetryingClient {
    return new RetryingClient({
      urls: apis.map((api) => api.url),
      prefix,
      ratePerSecond,
      batchSize,
    }).start();
  }

  /** The processing lists (one per shard) of the consumer `consumer` runs as now (its events). */
  processingKeys(consumer: TaskProcess): string[] {
    const id = currentConsumerId(consumer.output);
    assert.ok(id, `no consumer_started event in the output of ${consumer.name}\n${this.tails()}`);
    return this.shards.map((shard) => shard.processingPrefix + id);
  }

  /** Shard 0's processing list of `consumer`: its only one when the queue has one shard. */
  processingKey(consumer: TaskProcess): string {
    return this.processingKeys(consumer)[0]!;
  }

  /** How many items `consumer` holds now, over every shard. */
  async held(consumer: TaskProcess): Promise<number> {
    const lengths = await Promise.all(
      this.processingKeys(consumer).map((key) => this.world.redis.llen(key)),
    );
    return lengths.reduce((a, b) => a + b, 0);
  }

  /** Every processing list of this queue that holds items, live consumers or not. */
  async heldLists(): Promise<string[]> {
    const lists = await this.lists();
    return [...lists.keys()].filter((key) =>
      this.shards.some((shard) => key.startsWith(shard.processingPrefix))
    );
  }

  /**
   * Every shard's main, retry and non-empty processing lists with their lengths, each shard read
   * in one atomic step (`pending_lists.ts`) on the server serving it: what is not stored yet.
   */
  lists(): Promise<Map<string, number>> {
    return pendingLists(this.world.redis, this.shards);
  }

  /** Items queued, waiting for a retry or held by a consumer: not stored yet. */
  async pending(): Promise<number> {
    return [...(await this.lists()).values()].reduce((a, b) => a + b, 0);
  }

  /**
   * Waits until every shard's lists are empty and returns the ms it took. Fails at once when a
   * service exits by itself meanwhile.
   */
  async drain(timeoutMs = this.#patience.drainMs): Promise<number> {
    let last = "";
    return await waitFor(
      () => `queue ${this.queueName} to drain (${last})\n${this.tails(30)}`,
      async () => {
        this.assertRunning();
        let lists: Map<string, number>;
        try {
          lists = await this.lists();
        } catch (error) {
          // A cluster between masters: ask again. On one server, a failed read is a failure.
          if (!this.world.topology.failsOver) throw error;
          last = String(error);
          return false;
        }
        last = [...lists].map(([key, length]) => `${key}: ${length}`).join(", ");
        return [...lists.values()].every((length) => length === 0);
      },
      { timeoutMs, intervalMs: this.#patience.drainPollMs },
    );
  }

  /**
   * The backlog now, and how long the consumers take to bring it under 200 items while the load
   * goes on: the recovery time after an outage.
   */
  async catchUp(): Promise<{ backlog: number; ms: number }> {
    const backlog = await this.pending();
    const ms = await waitFor("the consumers to catch up", async () => {
      this.assertRunning();
      return (await this.pending()) < 200;
    }, { timeoutMs: 60_000, intervalMs: 20 });
    return { backlog, ms };
  }

  /** Every shard's dead letters, parsed. */
  async deadLetters(): Promise<DeadLetter[]> {
    const raw = await Promise.all(
      this.shards.map((shard) => this.world.redis.lrange(shard.dead, 0, -1)),
    );
    return raw.flat().map((entry) => JSON.parse(entry) as DeadLetter);
  }

  /**
   * Every answer other than 202 is explained by one of the scenario's faults, no request hung,
   * the indeterminate ones stay within the bound, and every answer came within its API's
   * REDIS_TIMEOUT_MS and `ANSWER_MARGIN_MS` (unless `answerWithinMs` says otherwise).
   */
  assertAnswers(outcomes: readonly Outcome[], options: AnswerCheckOptions = {}): void {
    const { problems } = checkAnswers(outcomes, this.#faults, {
      ...options,
      answerWithinMs: options.answerWithinMs ?? answerBound(this.#redisTimeouts),
    });
    assert.ok(problems.length === 0, `answers no fault explains:\n  ${problems.join("\n  ")}`);
  }

  /** Settles every refusal that named an id through `api` (`assertSettled`). */
  assertSettled(
    api: Api,
    outcomes: readonly Outcome[],
  ): Promise<{ stored: number; never: number }> {
    return assertSettled(this.world.sql, api.url, outcomes);
  }

  /** The promise, once drained (`stage_verify.ts`). */
  verify(outcomes: readonly Outcome[], options: VerifyOptions = {}): Promise<StageReport> {
    return verifyDelivery(this, outcomes, options);
  }

  /**
   * Ends a scenario's load (one generator, or several: single users and batches, say): stops it
   * and its keyed clients, waits for the queue to drain and {@linkcode verify}s every outcome.
   */
  async settle(
    load: LoadGenerator | readonly LoadGenerator[],
    options: VerifyOptions = {},
  ): Promise<{ outcomes: Outcome[]; drainMs: number; report: StageReport }> {
    const [loaded] = await Promise.all([
      Promise.all([load].flat().map((generator) => generator.stop())),
      ...[options.keyed ?? []].flat().map((client) => client.stop()),
    ]);
    const outcomes = loaded.flat();
    const drainMs = await this.drain();
    const report = await this.verify(outcomes, options);
    return { outcomes, drainMs, report };
  }

  /**
   * Fails if a service ended by itself, then stops every process still running with SIGTERM and
   * checks that each exits 0 in time.
   */
  async stopAll(): Promise<void> {
    this.assertRunning();
    const failed = await this.#roster.stopRunning(this.#patience.stopMs);
    assert.ok(failed.length === 0, `${failed.join("; ")}\n${this.tails()}`);
  }

  /**
   * Sends SIGTERM to each of `processes` at once, as a container stop does, and returns how each
   * ended and how long after the signal; one still running after `limitMs` (compose's grace
   * period) is `undefined`.
   */
  sigterm(processes: readonly TaskProcess[], limitMs = 30_000): Promise<Exit[]> {
    for (const process of processes) this.expectEnd(process);
    return this.#roster.sigterm(processes, limitMs);
  }

  /** The last lines of every process, and of the topology's servers if it keeps them. */
  tails(lines = 15): string {
    const servers = this.world.topology.tail(lines);
    return [...this.#roster.tails(lines), ...servers === undefined ? [] : [servers]].join("\n");
  }

  /** Prints the scenario's summary line. */
  summary(line: string): void {
    console.log(line);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.#roster[Symbol.asyncDispose]();
  }

  get #patience() {
    return this.world.topology.patience;
  }

  #ready(process: Tracked, event: string): Promise<void> {
    return this.#roster.waitForEvent(process, event, {
      timeoutMs: this.#patience.readyMs,
      tails: () => this.tails(),
    });
  }

  /** Waits until `url`'s `/readyz` answers 200; `endOk`: or until the process ended. */
  async #readyz(tracked: Tracked, url: string, { endOk = false } = {}): Promise<void> {
    try {
      await waitForHttp(`${url}/readyz`, {
        alive: () => tracked.exit === undefined,
        timeoutMs: this.#patience.readyMs,
      });
    } catch (error) {
      if (endOk && tracked.exit !== undefined) return;
      throw new Error(`${tracked.name} did not get ready: ${error}\n${this.tails()}`, {
        cause: error,
      });
    }
  }
}
