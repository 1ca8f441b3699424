/**
 * The queue's operations over Redis, shared by the API (which only enqueues)
 * and the consumer (which fetches, acknowledges, heartbeats and recovers).
 *
 * Delivery contract (enforced here and in the scripts, `lua/*.lua`):
 * - An item is in exactly one place at any moment: the main list, the retry
 *   list, one consumer's processing list, or the dead letters. Every move
 *   between them is one atomic script.
 * - A consumer acknowledges a batch only after PostgreSQL committed it, so a
 *   crash at any point leaves the batch in its processing list; once its
 *   heartbeat expires another consumer moves it to the retry list. Delivery is
 *   therefore at least once, and the `ON CONFLICT (id) DO NOTHING` insert makes
 *   the stored effect exactly once.
 * - A consumer whose heartbeat expired is "fenced": the scripts refuse it new
 *   work and ignore its acknowledgements, so it cannot trim items that were
 *   already handed to someone else. It re-registers under a new id.
 * - The status index moves with the items, in the same scripts: the push adds
 *   the ids to the set `<queue>:queued`, where they stay through fetch,
 *   hand-back, recovery and retry; the acknowledgement removes the ids it
 *   stored, and moves the ones it buried to the hash `<queue>:dead:ids`
 *   (id → dead letter; recovery does the same for the items it buries); a
 *   requeued dead letter is queued again and a purged one is forgotten. So an
 *   accepted user is in the index exactly while it is not stored, and since
 *   the acknowledgement follows the commit, a user missing from the index is
 *   either stored or was never accepted: {@linkcode RedisQueue.indexed} is
 *   read before the table (see `server/user_status.ts`). Items pushed without the index (the
 *   course's `LPUSH users …`) move and are stored just the same; they only
 *   have no status until stored.
 * - Every dead letter counts once under its {@linkcode DeadLetterKind} in
 *   `<queue>:dead:counts`, in the script that adds or removes it, so counting
 *   never reads the list.
 * - Replication. Redis replicates asynchronously: a master that acknowledged
 *   a write and dies before its replicas received it loses that write when a
 *   replica takes over (Redis Cluster's or Sentinel's failover). Without
 *   `waitReplicas`, a push answered 202 can be lost that way (at most the
 *   writes of the last moments before the failover). With `waitReplicas` N,
 *   every push is followed, on the same connection, by `WAIT N timeout`, and
 *   is confirmed only if N replicas acknowledged it: otherwise the push
 *   rejects with {@linkcode WriteUnconfirmedError}, and the API answers 503
 *   (the user may still be stored: "unconfirmed", never "accepted and lost").
 *   A confirmed push survives the failover of its master as long as one of
 *   the N replicas that hold it is promoted (Redis Cluster promotes the most
 *   up-to-date replica). Fetches and acknowledgements are never confirmed:
 *   a failover that undoes one only delivers its items again (the insert is
 *   idempotent by id, and an acknowledgement trims only the batch whose
 *   oldest item it names), so waiting for replicas would protect nothing and
 *   would stop a shard whose promoted master has no replica from draining.
 *
 * One `RedisQueue` is one shard of the queue (`keys.ts`); `sharded_queue.ts`
 * spreads the work over every shard.
 *
 * @module
 */

import { Cluster } from "ioredis";
import { encodeEnvelope, type UserEnvelope } from "./envelope.ts";
import type { QueueKeys } from "./keys.ts";
import { type CallOf, type LuaScript, type ReplyOf, runScript } from "./lua_script.ts";
import {
  ACK,
  defineQueueScripts,
  ENQUEUE,
  ENQUEUE_ONCE,
  FETCH,
  type FetchReply,
  HAND_BACK,
  HEARTBEAT,
  RECOVER,
  type RedisClient,
  REGISTER,
} from "./scripts.ts";

/** Raised by {@link RedisQueue.enqueue} when the queue is at its bound. */
export class QueueFullError extends Error {
  constructor(maxLength: number) {
    super(`Cannot enqueue: the queue holds its maximum of ${maxLength} items`);
    this.name = "QueueFullError";
  }
}

/** A Redis Cluster's answer that a slot is served elsewhere. */
const REDIRECT = /^(MOVED|ASK) /;

/** How many times a confirmed write follows a redirect before it fails. */
const MAX_REDIRECTS = 3;

/** Reloads a cluster client's map of slots to nodes; nothing for a standalone client. */
function refreshSlots(redis: RedisClient): Promise<void> {
  if (!(redis instanceof Cluster)) return Promise.resolve();
  return new Promise((resolve) => redis.refreshSlotsCache(() => resolve()));
}

/**
 * Raised when `WAIT` confirmed a write on fewer replicas than asked within
 * the timeout. The write happened on the master and may well survive; it is
 * just not known to survive a failover.
 */
export class WriteUnconfirmedError extends Error {
  /** For a push: how many of its users were pushed (the others did not fit). */
  readonly pushed: number;
  /**
   * For a push with an idempotency key: the id its key is queued under (an
   * earlier request's, when this one found the key seen). Set by the caller.
   */
  queuedAs?: string;

  constructor(what: string, wanted: number, confirmed: number, timeoutMs: number, pushed = 0) {
    super(
      `Cannot confirm the ${what} on ${wanted} replicas: ${confirmed} acknowledged it ` +
        `within ${timeoutMs} ms`,
    );
    this.name = "WriteUnconfirmedError";
    this.pushed = pushed;
  }
}

/** Items a consumer took, oldest first. */
export interface Batch {
  readonly items: readonly string[];
  /** True for an item recovered from a crashed consumer (always a batch of one). */
  readonly fromRetry: boolean;
  /** The shard it was taken from (`sharded_queue.ts`); absent means shard 0. */
  readonly shard?: number;
  /**
   * Set on an empty batch when recovered items wait, which only a fetch
   * holding nothing may take (see `lua/fetch.lua`).
   */
  readonly suspectWaiting?: boolean;
}

/**
 * Why an item was buried, as a small fixed set (the reason's text varies with
 * the item, so counts and filters use this):
 * - `invalid_item`: not a valid envelope (the consumer could not decode it);
 * - `database_refused`: PostgreSQL refused the row for its data (SQLSTATE
 *   class 22 or 23);
 * - `id_conflict`: the id is already stored with another name (or the row was
 *   neither inserted nor found);
 * - `consumer_crashed`: it was in the hands of MAX_CRASHES crashed consumers.
 * Records buried before kinds existed count as `unknown`.
 */
export type DeadLetterKind =
  | "invalid_item"
  | "database_refused"
  | "id_conflict"
  | "consumer_crashed";

/** Every {@linkcode DeadLetterKind}, and `unknown` for records that carry none. */
export const DEAD_LETTER_KINDS: readonly string[] = [
  "invalid_item",
  "database_refused",
  "id_conflict",
  "consumer_crashed",
  "unknown",
];

/** One entry of the dead-letter list, JSON-encoded. */
export interface DeadLetter {
  /** The item exactly as it was queued. */
  readonly payload: string;
  /** Why it can never be stored, in detail. */
  readonly reason: string;
  /** The class of `reason`, what dead letters are counted and filtered by. */
  readonly kind: DeadLetterKind;
  /** The user's id, when the item has one. */
  readonly id?: string;
  /** PostgreSQL's SQLSTATE when the database refused the row. */
  readonly sqlstate?: string;
  /** When it was buried (ISO 8601). */
  readonly dead_at: string;
}

/** Counts of every list of the queue, for tests, benchmarks and operators. */
export interface QueueDepth {
  readonly queued: number;
  readonly retry: number;
  readonly dead: number;
  readonly processing: number;
}

/**
 * An `Idempotency-Key` already queued a different user (another name): the
 * request is refused and nothing is pushed.
 */
export class IdempotencyConflictError extends Error {
  override readonly name = "IdempotencyConflictError";
  /** The id the key was first queued under. */
  readonly id: string;

  constructor(id: string) {
    super(`Cannot queue this user as its Idempotency-Key already queued another user (${id})`);
    this.id = id;
  }
}

/** Options of {@linkcode RedisQueue}. */
export interface RedisQueueOptions {
  /**
   * A push that Redis runs more than this many ms after `enqueue` was called
   * does nothing and `enqueue` rejects. Set it below the client's command
   * timeout, so a push the caller gave up on (and answered 503 for) cannot
   * still land when a stalled Redis resumes. 0 means no deadline.
   * @default 0
   */
  readonly enqueueWithinMs?: number;
  /**
   * Replicas that must hold each push before it counts as done (`WAIT`,
   * REDIS_WAIT_REPLICAS); 0 waits for none. @default 0
   */
  readonly waitReplicas?: number;
  /** How long each `WAIT` may take (REDIS_WAIT_TIMEOUT_MS). @default 200 */
  readonly waitTimeoutMs?: number;
}

/** The queue's operations; `redis` may be shared by many callers. */
export class RedisQueue {
  readonly #redis: RedisClient;
  readonly #enqueueWithinMs: number;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  readonly keys: QueueKeys;

  constructor(redis: RedisClient, keys: QueueKeys, options: RedisQueueOptions = {}) {
    // Before any pipeline is made from it: a pipeline knows only the scripts its client had.
    defineQueueScripts(redis);
    this.#redis = redis;
    this.#enqueueWithinMs = options.enqueueWithinMs ?? 0;
    this.#waitReplicas = options.waitReplicas ?? 0;
    this.#waitTimeoutMs = options.waitTimeoutMs ?? 200;
    this.keys = keys;
  }

  /**
   * Runs a script, then, when replicas must confirm it, `WAIT` on the same
   * connection: both in one pipeline, which ioredis sends to the one node
   * serving the script's keys (a Redis Cluster routes a keyless command of a
   * pipeline with the pipeline's slot), so `WAIT` counts the replicas of the
   * master that ran the script. Resolves with the script's reply and how many
   * replicas acknowledged it (`Infinity` when none were asked for).
   */
  async #confirmed<S extends LuaScript>(
    script: S,
    call: CallOf<S>,
  ): Promise<[reply: ReplyOf<S>, replicas: number]> {
    if (this.#waitReplicas === 0) return [await runScript(this.#redis, script, call), Infinity];
    for (let attempt = 1;; attempt++) {
      const pipeline = this.#redis.pipeline();
      // Only queued: the reply comes from exec().
      runScript(pipeline, script, call);
      pipeline.wait(this.#waitReplicas, this.#waitTimeoutMs);
      const replies = await pipeline.exec();
      const [[scriptError, reply], [waitError, replicas]] = replies as [
        [Error | null, ReplyOf<S>],
        [Error | null, number],
      ];
      // The slot moved (a failover that left the old master alive, a
      // resharding): the script did not run. ioredis follows a redirect for a
      // single command, but not for a pipeline whose WAIT succeeded on the old
      // node, and nothing else makes it refresh its slot map while that node
      // lives; so refresh it here and send the pipeline again.
      if (scriptError && REDIRECT.test(scriptError.message) && attempt < MAX_REDIRECTS) {
        await refreshSlots(this.#redis);
        continue;
      }
      if (scriptError) throw scriptError;
      if (waitError) throw waitError;
      return [reply, replicas];
    }
  }

  /**
   * Pushes users at the left of the main list, and marks them queued in the
   * index, unless that would take the list past `maxLength` (then it pushes
   * none and rejects with {@linkcode QueueFullError}); resolves only after
   * Redis acknowledged the push.
   */
  async enqueue(maxLength: number, ...users: readonly UserEnvelope[]): Promise<void> {
    const pushed = await this.#push("all", maxLength, users, Date.now());
    if (pushed < users.length) throw new QueueFullError(maxLength);
  }

  /**
   * Queues `user` once for the client's idempotency `key`, under the key's
   * record (see `lua/enqueue_once.lua`): the push and the record in one
   * step. Resolves with the id the key is queued under, this user's if this
   * call pushed it, or the one of the earlier request with the same key and
   * name; rejects with {@linkcode IdempotencyConflictError} when that earlier
   * request named another user, and otherwise as {@linkcode enqueue} does. The
   * record lives `ttlSeconds` from the push.
   */
  async enqueueOnce(
    user: UserEnvelope,
    { key, maxLength, ttlSeconds }: { key: string; maxLength: number; ttlSeconds: number },
  ): Promise<string> {
    const since = Date.now();
    const deadline = this.#enqueueWithinMs > 0 ? since + this.#enqueueWithinMs : 0;
    const [reply, replicas] = await this.#confirmed(ENQUEUE_ONCE, {
      keys: {
        queue: this.keys.queue,
        queuedIds: this.keys.queuedIds,
        record: this.keys.idempotencyPrefix + key,
      },
      args: {
        deadline,
        maxLength,
        payload: encodeEnvelope(user),
        id: user.id,
        name: user.name,
        ttlSeconds,
      },
    });
    if (reply === -2) throw this.#tooLate();
    if (reply === 0) throw new QueueFullError(maxLength);
    const [status, id] = reply;
    if (status === 3) throw new IdempotencyConflictError(id);
    if (replicas < this.#waitReplicas) {
      const error = new WriteUnconfirmedError(
        "push",
        this.#waitReplicas,
        replicas,
        this.#waitTimeoutMs,
        status === 1 ? 1 : 0,
      );
      error.queuedAs = id;
      throw error;
    }
    return id;
  }

  /**
   * Pushes as many of `users`, from the first, as fit under `maxLength`, as
   * one atomic step, and resolves with how many that was, once Redis
   * acknowledged it. The deadline (`enqueueWithinMs`) counts from `since`,
   * when the earliest of them asked to be queued.
   */
  enqueueFitting(
    maxLength: number,
    users: readonly UserEnvelope[],
    since: number = Date.now(),
  ): Promise<number> {
    return this.#push("fit", maxLength, users, since);
  }

  /** A push Redis ran after its deadline, which did nothing (`lua/includes/past_deadline.lua`). */
  #tooLate(): Error {
    return new Error(
      `Cannot enqueue as Redis ran the push too late: not within ${this.#enqueueWithinMs} ms`,
    );
  }

  async #push(
    mode: "all" | "fit",
    maxLength: number,
    users: readonly UserEnvelope[],
    since: number,
  ): Promise<number> {
    const deadline = this.#enqueueWithinMs > 0 ? since + this.#enqueueWithinMs : 0;
    const [pushed, replicas] = await this.#confirmed(ENQUEUE, {
      keys: { queue: this.keys.queue, queuedIds: this.keys.queuedIds },
      args: { deadline, maxLength, mode, count: users.length },
      restArgs: [...users.map(encodeEnvelope), ...users.map((user) => user.id)],
    });
    if (pushed === -2) throw this.#tooLate();
    if (pushed > 0 && replicas < this.#waitReplicas) {
      throw new WriteUnconfirmedError(
        "push",
        this.#waitReplicas,
        replicas,
        this.#waitTimeoutMs,
        pushed,
      );
    }
    return pushed;
  }

  /** Registers a consumer and starts its heartbeat. */
  async register(consumerId: string, ttlMs: number): Promise<void> {
    await runScript(this.#redis, REGISTER, {
      keys: { consumers: this.keys.consumers, heartbeat: this.keys.heartbeatPrefix + consumerId },
      args: { consumerId, ttlMs },
    });
  }

  /** Extends a consumer's heartbeat; false means it was fenced and must re-register. */
  async heartbeat(consumerId: string, ttlMs: number): Promise<boolean> {
    const alive = await runScript(this.#redis, HEARTBEAT, {
      keys: { consumers: this.keys.consumers, heartbeat: this.keys.heartbeatPrefix + consumerId },
      args: { consumerId, ttlMs },
    });
    return alive === 1;
  }

  /**
   * Moves up to `max` items into the consumer's processing list and returns
   * them oldest first; an empty batch when there is nothing; `undefined` when
   * the consumer is fenced. `held` is how many items the consumer holds
   * unacknowledged (the batch it is storing while it fetches the next one);
   * whatever else the list holds came from a fetch whose reply was lost, and
   * is returned again instead of new items. `holdingElsewhere`: the consumer
   * holds a batch in another shard's list (`sharded_queue.ts`), so, holding
   * something, it is not given a recovered item either.
   */
  async fetch(
    consumerId: string,
    max: number,
    held = 0,
    holdingElsewhere = false,
  ): Promise<Batch | undefined> {
    // Never confirmed on replicas (WAIT): a failover that undoes the move only delivers its
    // items again, which the idempotent insert absorbs (`server-consumer/main.ts`).
    const reply = await runScript(this.#redis, FETCH, {
      keys: {
        consumers: this.keys.consumers,
        retry: this.keys.retry,
        queue: this.keys.queue,
        processing: this.keys.processingPrefix + consumerId,
      },
      args: { consumerId, max, held, holdingElsewhere: holdingElsewhere ? "1" : "0" },
    });
    return this.#batchOf(reply);
  }

  /** A fetch's reply (see `lua/fetch.lua`) as a batch; `undefined` when fenced. */
  #batchOf(reply: FetchReply): Batch | undefined {
    if (reply === -1) return undefined;
    const [source, taken] = reply as [0 | 1 | 2, string[] | string | undefined];
    if (source === 1) return { items: [taken as string], fromRetry: true };
    if (source === 2) return { items: [], fromRetry: false, suspectWaiting: true };
    // The script returns the list's order (newest at the left); FIFO wants the oldest first.
    const items = (taken as string[] | undefined) ?? [];
    items.reverse();
    return { items, fromRetry: false };
  }

  /**
   * Acknowledges a handled batch, records its dead letters and updates the
   * index (`storedIds` leave it, the dead letters' ids become their records)
   * in one step. Call it only once the stored rows are committed. Resolves
   * false when the consumer was fenced (nothing was acknowledged). A repeat
   * of an acknowledgement that ran acknowledges nothing more.
   */
  async ack(
    consumerId: string,
    batch: Batch,
    deadLetters: readonly DeadLetter[] = [],
    storedIds: readonly string[] = [],
  ): Promise<boolean> {
    return await this.#ack(this.#redis, consumerId, batch, deadLetters, storedIds, 0, 0) === 1;
  }

  /** {@linkcode ackAndFetch} fetches, always (the consumer's loop asks). */
  readonly fetchesWithAck = true;

  /**
   * {@linkcode ack}, and in the same script call the next batch, as
   * {@linkcode fetch} takes it for a consumer holding `held` items once
   * `batch` is acknowledged (the batch fetched while `batch` was stored, or
   * none). Resolves `undefined` when the consumer was fenced (nothing
   * acknowledged, nothing taken).
   */
  async ackAndFetch(
    consumerId: string,
    batch: Batch,
    deadLetters: readonly DeadLetter[],
    storedIds: readonly string[],
    max: number,
    held = 0,
  ): Promise<Batch | undefined> {
    const reply = await this.#ack(
      this.#redis,
      consumerId,
      batch,
      deadLetters,
      storedIds,
      max,
      held,
    );
    return this.#batchOf(reply === 0 ? -1 : reply as Exclude<typeof reply, 1>);
  }

  #ack(
    redis: RedisClient,
    consumerId: string,
    batch: Batch,
    deadLetters: readonly DeadLetter[],
    storedIds: readonly string[],
    next: number,
    heldAfter: number,
  ) {
    const { keys } = this;
    return runScript(redis, ACK, {
      keys: {
        consumers: keys.consumers,
        processing: keys.processingPrefix + consumerId,
        deliveries: keys.deliveries,
        dead: keys.dead,
        queuedIds: keys.queuedIds,
        deadIds: keys.deadIds,
        deadCounts: keys.deadCounts,
        stats: keys.stats,
        retry: keys.retry,
        queue: keys.queue,
      },
      args: {
        consumerId,
        count: batch.items.length,
        fromRetry: batch.fromRetry ? "1" : "0",
        // Oldest first: what the acknowledgement checks is still at the list's right end.
        oldestItem: batch.items[0] ?? "",
        next,
        heldAfter,
        storedCount: storedIds.length,
      },
      restArgs: [
        ...storedIds,
        ...deadLetters.flatMap((letter) => [letter.id ?? "", letter.kind, JSON.stringify(letter)]),
      ],
    });
  }

  /**
   * The user's entry in the index: `"queued"`, its dead letter, or undefined
   * when the id is not there (stored, never accepted, or purged).
   */
  async indexed(id: string): Promise<"queued" | DeadLetter | undefined> {
    // One MULTI, so both are read at one instant: read apart, a requeue in
    // between could make a dead user look absent from both.
    const [[, queued], [, dead]] = (await this.#redis.multi()
      .sismember(this.keys.queuedIds, id)
      .hget(this.keys.deadIds, id)
      .exec()) as [[null, number], [null, string | null]];
    if (queued === 1) return "queued";
    return dead === null ? undefined : JSON.parse(dead) as DeadLetter;
  }

  /**
   * Recovers the work of every consumer whose heartbeat expired: reads the
   * registered consumers, then passes the script their keys (the script
   * re-checks each one; one registered in between is seen next time).
   */
  async recover(maxCrashes: number, now: Date = new Date()) {
    const ids = await this.#redis.smembers(this.keys.consumers);
    if (ids.length === 0) return { recovered: 0, buried: 0, consumers: 0 };
    const { keys } = this;
    const [recovered, buried, consumers] = await runScript(this.#redis, RECOVER, {
      keys: {
        consumers: keys.consumers,
        retry: keys.retry,
        dead: keys.dead,
        deliveries: keys.deliveries,
        queuedIds: keys.queuedIds,
        deadIds: keys.deadIds,
        deadCounts: keys.deadCounts,
        stats: keys.stats,
      },
      args: { maxCrashes, now: now.toISOString() },
      restKeys: ids.flatMap((id) => [keys.processingPrefix + id, keys.heartbeatPrefix + id]),
      restArgs: ids,
    });
    return { recovered, buried, consumers };
  }

  /**
   * Returns a stopping consumer's unfinished items to the front of the queue,
   * clearing their crash counts (a graceful stop is no crash).
   */
  handBack(consumerId: string): Promise<number> {
    return runScript(this.#redis, HAND_BACK, {
      keys: {
        consumers: this.keys.consumers,
        heartbeat: this.keys.heartbeatPrefix + consumerId,
        processing: this.keys.processingPrefix + consumerId,
        queue: this.keys.queue,
        deliveries: this.keys.deliveries,
        stats: this.keys.stats,
      },
      args: { consumerId },
    });
  }

  /** The size of every list of the queue (processing lists summed). */
  async depth(): Promise<QueueDepth> {
    const processingKeys = await this.#redis.smembers(this.keys.consumers).then((ids) =>
      ids.map((id) => this.keys.processingPrefix + id)
    );
    const lengths = await Promise.all(
      [this.keys.queue, this.keys.retry, this.keys.dead, ...processingKeys].map((key) =>
        this.#redis.llen(key)
      ),
    );
    const [queued = 0, retry = 0, dead = 0, ...processing] = lengths;
    return { queued, retry, dead, processing: processing.reduce((sum, n) => sum + n, 0) };
  }
}
