/**
 * The stage of the Redis Cluster tests: the API and the consumers as real processes
 * (`deno task server`, `deno task consumer`) in cluster mode (REDIS_CLUSTER_NODES) against a real
 * cluster of 3 masters and 3 replicas on loopback (`tools/harness/redis_cluster.ts`) and a real
 * PostgreSQL, a load that remembers every request (`fault_load.ts`), and the checks of the fault
 * suite (`delivery_check.ts`, `answer_check.ts`) run over every shard of the queue.
 *
 * Each test file starts one cluster and one PostgreSQL on first use and stops them after its last
 * test; each scenario ({@linkcode clusterScenario}) gets a fresh queue name (so fresh keys, in
 * slots of their own), an empty table and its own processes, SIGKILLed afterwards whatever
 * happened. A scenario that kills a master brings it back (as a replica) before it ends, so the
 * next one finds the cluster whole; {@linkcode ClusterStage.open} waits for that anyway.
 *
 * Every scenario prints one accounting line ({@linkcode accounting}): what the clients were told
 * and what PostgreSQL holds once every shard is drained.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Cluster } from "ioredis";
import postgres from "postgres";
import { type QueueKeys, queueShards, shardOf } from "@users-pipeline/queue";
import { withLoadTurn } from "@users-pipeline/harness/load_turn";
import { freePort } from "@users-pipeline/harness/ports";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { RedisCluster } from "@users-pipeline/harness/redis_cluster";
import {
  migrate,
  projectEnv,
  startPostgres,
  type TestPostgres,
} from "@users-pipeline/harness/services";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import {
  type AnswerCheckOptions,
  checkAnswers,
  type Excuse,
  type Fault,
  QUEUE_UNAVAILABLE,
  QUEUE_UNCONFIRMED,
} from "./answer_check.ts";
import { checkDelivery, type DeliveryReport, describeProblems } from "./delivery_check.ts";
import { LoadGenerator, type LoadOptions, type Outcome } from "./fault_load.ts";
import {
  answerBound,
  type EnvChanges,
  FAST_ENV,
  killAll,
  processTree,
  TEST_APP,
} from "./fault_stage.ts";
import { PENDING_LISTS_SCRIPT, pendingFromReply } from "./pending_lists.ts";
import { postgresConnection } from "./postgres_client.ts";
import { currentConsumerId, hasEvent } from "./service_events.ts";

/** The services a test file's scenarios share, and the test's own clients of them. */
export interface ClusterWorld {
  readonly cluster: RedisCluster;
  readonly pg: TestPostgres;
  /** An ioredis Cluster client for the checks; it follows the slots to a promoted replica. */
  readonly redis: Cluster;
  /** A client of `pg`'s database, as application {@linkcode TEST_APP}. */
  readonly sql: postgres.Sql;
}

/** Options of {@linkcode clusterScenario}. */
export interface ClusterScenarioOptions {
  /** QUEUE_SHARDS of every service of the scenario. @default 1 */
  shards?: number;
}

/**
 * Registers a scenario as a test of its own: the file's cluster and PostgreSQL (started on first
 * use), a fresh {@linkcode ClusterStage}, and its processes killed afterwards.
 */
export function clusterScenario(
  name: string,
  options: ClusterScenarioOptions,
  fn: (stage: ClusterStage) => Promise<void>,
): void {
  Deno.test({
    name,
    // The file's cluster, PostgreSQL and clients outlive each test.
    sanitizeOps: false,
    sanitizeResources: false,
  }, () =>
    // Each scenario drives 500–1,500 requests a second through six Redis servers and four
    // services: it takes its turn with the Docker tests and the fault suite (load_turn.ts), or
    // the Swarm tests' pushes, starved beside it, outlive REDIS_TIMEOUT_MS.
    withLoadTurn(name, async () => {
      const world = await sharedWorld();
      await using stage = await ClusterStage.open(world, options.shards ?? 1);
      await fn(stage);
    }));
}

let fileWorld: Promise<ClusterWorld & { close(): Promise<void> }> | undefined;

function sharedWorld(): Promise<ClusterWorld> {
  fileWorld ??= openWorld();
  return fileWorld;
}

// Each test file runs in an isolate of its own, so this closes that file's services.
Deno.test.afterAll(async () => {
  await fileWorld?.then((world) => world.close(), () => {});
});

async function openWorld(): Promise<ClusterWorld & { close(): Promise<void> }> {
  await using stack = new AsyncDisposableStack();
  const [cluster, pg] = await Promise.all([RedisCluster.start(), startPostgres()]);
  stack.use(cluster);
  stack.use(pg);
  await migrate(pg.env);
  const redis = clusterClient(cluster);
  const sql = postgres({
    ...postgresConnection(pg.env),
    max: 2,
    onnotice: () => {},
    connection: { application_name: TEST_APP },
  });
  const services = stack.move();
  return {
    cluster,
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

/** An ioredis Cluster client of `cluster`, for the test's own checks. */
export function clusterClient(cluster: RedisCluster): Cluster {
  const redis = new Cluster(
    cluster.nodes.map((node) => ({ host: "127.0.0.1", port: node.port })),
    // Masters are killed on purpose: commands wait for the slots to have an owner again.
    { retryDelayOnClusterDown: 200, retryDelayOnFailover: 200, maxRedirections: 32 },
  );
  redis.on("error", () => {});
  return redis;
}

/** A running API replica. */
export interface Api {
  readonly process: TaskProcess;
  readonly url: string;
}

/** A process the stage started, and what became of it. */
interface Tracked {
  readonly process: TaskProcess;
  exit?: Deno.CommandStatus;
  /** Whether its end is the scenario's doing. */
  endsOnPurpose: boolean;
}

/**
 * Where a master went on alone before it died, its replicas cut off: without REDIS_WAIT_REPLICAS
 * a 202 its shards gave meanwhile may be lost. README, "Failover and `REDIS_WAIT_REPLICAS`":
 * "without WAIT a failover can lose users answered 202 in its last moments".
 */
export interface LossWindow {
  /** When the cut began: at or before the replicas' links were dropped (ms since the epoch). */
  readonly from: number;
  /** When the master was killed (ms since the epoch). */
  readonly to: number;
  /** The shards (their index) the master served. */
  readonly shards: ReadonlySet<number>;
}

/** Options of {@linkcode ClusterStage.verify}. */
export interface ClusterVerifyOptions extends AnswerCheckOptions {
  /**
   * The only 202s that may be missing from the table: those of a request that overlapped the
   * window, for a user of one of its shards (only without REDIS_WAIT_REPLICAS, across a master's
   * failover). Any other lost user fails. @default none may be lost
   */
  mayLose?: LossWindow;
  /**
   * Whether crash counts may be left behind, counted rather than failed, as across a master's
   * failover: consumers whose heartbeats expired while their shard had no master are recovered,
   * which counts a crash against each item they held; a failover can then undo the
   * acknowledgement that clears a count (acknowledgements are not WAITed: a lost one only means
   * a redelivery, harmless under the same id), and a fetch of a recovered item whose WAIT failed
   * is sent again and returns the item as an ordinary one, whose acknowledgement leaves its count
   * (FETCH in `queue/scripts.ts`). A count left behind is a few bytes, and only matters if that
   * item crashes consumers again. @default false
   */
  crashCountsMayRemain?: boolean;
}

/** What one scenario found, for its accounting line. */
export interface ClusterReport extends DeliveryReport {
  /** Rows of `users` once drained (each distinct name once; duplicates are in `duplicated`). */
  readonly stored: number;
  /** Answered 503 (Redis unreachable or the write not confirmed): may be stored, once at most. */
  readonly unconfirmed: number;
  /** Of those, how many were stored. */
  readonly unconfirmedStored: number;
  /** Crash counts left in the shards' `deliveries` hashes once drained. */
  readonly crashCounts: number;
}

/**
 * One scenario's queue (a fresh name over `shards` shards), its processes, its faults and the
 * checks.
 */
export class ClusterStage implements AsyncDisposable {
  readonly world: ClusterWorld;
  /** QUEUE_NAME of the scenario's services. */
  readonly queueName: string;
  /** Every shard's keys, shard 0 first. */
  readonly shards: readonly QueueKeys[];
  readonly #tracked: Tracked[] = [];
  readonly #faults: Fault[] = [];
  /** Each API's REDIS_TIMEOUT_MS by its URL. */
  readonly #redisTimeouts = new Map<string, number>();
  static #counter = 0;

  private constructor(world: ClusterWorld, shards: number) {
    this.world = world;
    this.queueName = `cluster${Deno.pid}-${++ClusterStage.#counter}`;
    this.shards = queueShards(this.queueName, { shards, cluster: true });
  }

  /**
   * A fresh queue and an empty table, once the cluster is whole: a node a failed scenario left
   * dead is started again first.
   */
  static async open(world: ClusterWorld, shards: number): Promise<ClusterStage> {
    for (const node of world.cluster.nodes) {
      if (!node.server.process.running) await node.server.start();
    }
    await world.cluster.waitHealthy();
    await world.sql`truncate users`;
    return new ClusterStage(world, shards);
  }

  /**
   * A service's settings: project.env, the stage's PostgreSQL, the cluster's nodes and the
   * scenario's queue, the fault suite's short timings ({@linkcode FAST_ENV}), then `changes`.
   */
  env(changes: EnvChanges = {}): Record<string, string> {
    const defaults = projectEnv();
    const env: Record<string, string> = {
      ...defaults,
      ...this.world.pg.env,
      REDIS_CLUSTER_NODES: this.world.cluster.seeds,
      QUEUE_NAME: this.queueName,
      QUEUE_SHARDS: String(this.shards.length),
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

  /**
   * Starts an API replica and waits until its `/readyz` answers 200. Its REDIS_TIMEOUT_MS is
   * project.env's (1 s), not {@linkcode FAST_ENV}'s half second: a master's death shows either
   * way, and on a machine busy with other tests a push on a healthy cluster can take longer
   * than half a second, a 503 that would measure the machine rather than the cluster.
   */
  async server(changes: EnvChanges = {}): Promise<Api> {
    const port = freePort();
    const env = this.env({ PORT: String(port), REDIS_TIMEOUT_MS: undefined, ...changes });
    const process = new TaskProcess("server", env, `server:${port}`);
    const tracked = this.#track(process);
    const url = `http://127.0.0.1:${port}`;
    this.#redisTimeouts.set(url, Number(env.REDIS_TIMEOUT_MS));
    await waitForHttp(`${url}/readyz`, {
      alive: () => tracked.exit === undefined,
      timeoutMs: 30_000,
    }).catch((error) => {
      throw new Error(`${process.name} did not get ready: ${error}\n${this.tails()}`, {
        cause: error,
      });
    });
    return { process, url };
  }

  /**
   * Starts a consumer and waits until it registered (`consumer_started`) and, unless
   * `registeredOnly`, until its `/readyz` answers 200 (which needs PostgreSQL).
   */
  async consumer(changes: EnvChanges = {}, { registeredOnly = false } = {}): Promise<TaskProcess> {
    const port = freePort();
    const count = this.#tracked.filter((t) => t.process.name.startsWith("consumer-")).length;
    const process = new TaskProcess(
      "consumer",
      this.env({ PORT: String(port), ...changes }),
      `consumer-${count + 1}`,
    );
    const tracked = this.#track(process);
    await waitFor(() => `${process.name} to register\n${this.tails()}`, () => {
      if (hasEvent(process.output, "consumer_started")) return true;
      if (tracked.exit !== undefined) {
        throw new Error(`${process.name} exited ${tracked.exit.code} before it was ready`);
      }
      return false;
    }, { timeoutMs: 30_000 });
    if (registeredOnly) return process;
    await waitForHttp(`http://127.0.0.1:${port}/readyz`, {
      alive: () => tracked.exit === undefined,
      timeoutMs: 30_000,
    });
    return process;
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
   * SIGKILLs the service `process` runs and the task runner above it at once (read first, so the
   * kill follows the caller's last check without a gap); its end is expected.
   */
  kill(process: TaskProcess): void {
    const pids = processTree(process.pid);
    this.#tracked.find((t) => t.process === process)!.endsOnPurpose = true;
    killAll(pids, "SIGKILL");
  }

  /**
   * Records a fault the scenario causes from now until the returned function is called, plus
   * `graceMs`: requests overlapping it may get the answers `excuses` names.
   */
  fault(what: string, excuses: readonly Excuse[], { graceMs = 1_000 } = {}): () => void {
    const i = this.#faults.push({ what, from: Date.now(), to: Infinity, excuses }) - 1;
    return () => {
      this.#faults[i] = { ...this.#faults[i]!, to: Date.now() + graceMs };
    };
  }

  /** The processing lists (one per shard) of the consumer `consumer` runs as now. */
  processingKeys(consumer: TaskProcess): string[] {
    const id = currentConsumerId(consumer.output);
    assert.ok(id, `no consumer_started event in the output of ${consumer.name}\n${this.tails()}`);
    return this.shards.map((shard) => shard.processingPrefix + id);
  }

  /** How many items `consumer` holds now, over every shard. */
  async held(consumer: TaskProcess): Promise<number> {
    const lengths = await Promise.all(
      this.processingKeys(consumer).map((key) => this.world.redis.llen(key)),
    );
    return lengths.reduce((a, b) => a + b, 0);
  }

  /**
   * Every shard's main, retry and non-empty processing lists with their lengths, each shard read
   * in one atomic step (`pending_lists.ts`) on the master serving it.
   */
  async lists(): Promise<Map<string, number>> {
    const all = new Map<string, number>();
    for (const shard of this.shards) {
      const reply = await this.world.redis.eval(
        PENDING_LISTS_SCRIPT,
        2,
        shard.queue,
        shard.retry,
        `${shard.processingPrefix}*`,
      ) as (string | number)[];
      for (const [key, length] of pendingFromReply(reply)) all.set(key, length);
    }
    return all;
  }

  /**
   * Waits until every shard's lists are empty and returns the ms it took. Fails at once when a
   * service exits by itself meanwhile.
   */
  async drain(timeoutMs = 90_000): Promise<number> {
    let last = "";
    return await waitFor(
      () => `queue ${this.queueName} to drain (${last})\n${this.tails(30)}`,
      async () => {
        this.assertRunning();
        try {
          const lists = await this.lists();
          last = [...lists].map(([key, length]) => `${key}: ${length}`).join(", ");
          return [...lists.values()].every((length) => length === 0);
        } catch (error) {
          // The cluster is between masters: ask again.
          last = String(error);
          return false;
        }
      },
      { timeoutMs, intervalMs: 200 },
    );
  }

  /**
   * The promise, once drained: nothing accepted lost (but inside `mayLose`'s window), nothing
   * stored twice or under another id, nothing stored that was refused other than with a 503
   * `queue_unavailable` or `unconfirmed` (whose push may have run), every answer other than 202
   * explained by a fault, every answer within its API's REDIS_TIMEOUT_MS and
   * `ANSWER_MARGIN_MS` (`fault_stage.ts`), no dead letter, every shard's lists and status index empty (and
   * its crash counts, unless `crashCountsMayRemain`), no service ended by itself. Prints
   * `<label>: <accounting>` first, so the figures are there whatever the verdict.
   */
  async verify(
    label: string,
    outcomes: readonly Outcome[],
    options: ClusterVerifyOptions = {},
  ): Promise<ClusterReport> {
    const { redis, sql } = this.world;
    const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
    // README, "Nothing refused is queued — with one narrow exception": a 503 queue_unavailable
    // whose push may have run, and a 503 unconfirmed, whose push ran; no other refusal pushed.
    // Whether each fell inside a fault that explains it is checkAnswers' to say.
    const unconfirmed = outcomes.filter((o) =>
      o.kind === "rejected" && o.status === 503 &&
      (o.code === QUEUE_UNCONFIRMED || o.code === QUEUE_UNAVAILABLE)
    );
    const report = checkDelivery(outcomes, rows, { mayStore: unconfirmed.map((o) => o.name) });
    const stored = new Set(rows.map((row) => row.name));
    const left = await Promise.all(this.shards.map((shard) =>
      Promise.all([
        redis.llen(shard.queue),
        redis.llen(shard.retry),
        redis.llen(shard.dead),
        redis.scard(shard.queuedIds),
        redis.hlen(shard.deliveries),
      ])
    ));
    const result: ClusterReport = {
      ...report,
      stored: stored.size,
      unconfirmed: unconfirmed.length,
      unconfirmedStored: report.mayStoreStored,
      crashCounts: left.reduce((sum, lengths) => sum + lengths[4], 0),
    };
    console.log(`${label}: ${accounting(result)}`);

    this.assertRunning();
    const { mayLose } = options;
    const byName = new Map(outcomes.map((o) => [o.name, o]));
    const lost = mayLose === undefined ? report : {
      ...report,
      lost: report.lost.filter((name) => !inLossWindow(byName.get(name), mayLose, this.shards)),
    };
    const problems = [
      lost.lost.length,
      report.duplicated.length,
      report.unexpectedRows.length,
      report.wrongIds.length,
      report.unexpectedAnswers.length,
    ].some((n) => n > 0);
    assert.ok(!problems, `${describeProblems(lost)}\n${this.tails()}`);
    // Every answer on time (README, "Every answer is prompt"), and a 503 unconfirmed only inside
    // a failover the scenario recorded: with a replica behind each master, nothing else keeps a
    // push from being confirmed within REDIS_WAIT_TIMEOUT_MS.
    const { problems: unexplained } = checkAnswers(outcomes, this.#faults, {
      ...options,
      answerWithinMs: options.answerWithinMs ?? answerBound(this.#redisTimeouts),
    });
    assert.ok(
      unexplained.length === 0,
      `answers no fault explains:\n  ${unexplained.join("\n  ")}`,
    );
    this.shards.forEach((shard, i) => {
      const [queue, retry, dead, queued, crashCounts] = left[i]!;
      assert.deepEqual(
        { queue, retry, dead, queued },
        { queue: 0, retry: 0, dead: 0, queued: 0 },
        `shard ${shard.queue}: main, retry, dead and status index all empty`,
      );
      if (!options.crashCountsMayRemain) {
        assert.equal(crashCounts, 0, `shard ${shard.queue}: crash counts left behind`);
      }
    });
    return result;
  }

  /** Fails when a process exited that the scenario did not kill. */
  assertRunning(): void {
    const ended = this.#tracked.filter((t) => t.exit && !t.endsOnPurpose);
    if (ended.length === 0) return;
    const which = ended.map((t) => `${t.process.name} (exit ${t.exit!.code}, ${t.exit!.signal})`);
    throw new Error(`exited by itself during the scenario: ${which.join(", ")}\n${this.tails()}`);
  }

  /**
   * Fails if a service ended by itself, then stops every process still running with SIGTERM and
   * checks that each exits 0 within 30 s.
   */
  async stopAll(): Promise<void> {
    this.assertRunning();
    const running = this.#tracked.filter((t) => t.exit === undefined);
    for (const { process } of running) {
      // The service itself, as a container stop does, not the task runner above it.
      killAll(processTree(process.pid).filter((pid) => pid !== process.pid), "SIGTERM");
    }
    const failures = await Promise.all(running.map(async ({ process }) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), 30_000);
      });
      const status = await Promise.race([process.status, late]);
      clearTimeout(timer);
      if (status === undefined) return `${process.name} still runs 30 s after SIGTERM`;
      return status.code === 0 ? undefined : `${process.name} exited ${status.code}`;
    }));
    const failed = failures.filter((failure) => failure !== undefined);
    assert.ok(failed.length === 0, `${failed.join("; ")}\n${this.tails()}`);
  }

  /** The last lines of every process and of the cluster, for failure messages. */
  tails(lines = 15): string {
    return [
      ...this.#tracked.map((t) =>
        `--- ${t.process.name}\n${t.process.output.slice(-lines).join("\n")}`
      ),
      `--- redis cluster\n${this.world.cluster.output.tail(lines)}`,
    ].join("\n");
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const { process, exit } of this.#tracked) if (exit === undefined) process.kill("SIGKILL");
    await Promise.allSettled(this.#tracked.map((t) => t.process.status));
  }

  #track(process: TaskProcess): Tracked {
    const tracked: Tracked = { process, endsOnPurpose: false };
    process.status.then((status) => {
      tracked.exit = status;
    }, () => {});
    this.#tracked.push(tracked);
    return tracked;
  }
}

/**
 * Whether `outcome` is a 202 the window may lose: its request overlapped the window (a push the
 * master ran alone is answered after the cut and sent before the kill) and its user's shard is
 * one the master served.
 */
function inLossWindow(
  outcome: Outcome | undefined,
  window: LossWindow,
  shards: readonly QueueKeys[],
): boolean {
  if (outcome?.kind !== "accepted") return false;
  const overlaps = outcome.sentAt <= window.to && outcome.sentAt + outcome.ms >= window.from;
  return overlaps && window.shards.has(shardOf(outcome.id!, shards.length));
}

/**
 * The accounting line every scenario prints: `accepted 1200, stored 1200, lost 0, duplicated 0,
 * unconfirmed 35 (12 stored), refused 0, indeterminate 0 (0 stored), crash counts left 0`.
 */
export function accounting(report: ClusterReport): string {
  return `accepted ${report.accepted}, stored ${report.stored}, lost ${report.lost.length}, ` +
    `duplicated ${report.duplicated.length}, unconfirmed ${report.unconfirmed} ` +
    `(${report.unconfirmedStored} stored), refused ${report.rejected - report.unconfirmed}, ` +
    `indeterminate ${report.indeterminate} (${report.indeterminateStored} stored), ` +
    `crash counts left ${report.crashCounts}`;
}
