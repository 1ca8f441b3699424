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
 *   already handed to someone else (its fetches, acknowledgements and
 *   heartbeats reject with {@linkcode FencedError}). It re-registers under a new id.
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
 *   every push is followed, on the same connection, by `WAIT N timeout` (one
 *   in flight per node, covering every push sent since the last:
 *   `confirmed_write.ts`), and is confirmed only if N replicas acknowledged
 *   it: otherwise the push rejects with {@linkcode WriteUnconfirmedError}
 *   within two `WAIT` timeouts, and the API answers 503 (the user may still
 *   be stored: "unconfirmed", never "accepted and lost").
 *   A confirmed push survives the failover of its master as long as one of
 *   the N replicas that hold it is promoted (Redis Cluster promotes the most
 *   up-to-date replica). Fetches and acknowledgements are never confirmed:
 *   a failover that undoes one only delivers its items again (the insert is
 *   idempotent by id, and an acknowledgement trims only the batch whose
 *   oldest item it names), so waiting for replicas would protect nothing and
 *   would stop a shard whose promoted master has no replica from draining.
 *   The one item an undone fetch can store twice is a bare `{"name": …}`
 *   pushed straight into Redis, which gets its id in the fetch (`lua/includes/with_id.lua`):
 *   fetched again, it gets another. No 202 is such an item.
 *
 * One `RedisQueue` is one shard of the queue (`keys.ts`); `sharded_queue.ts`
 * spreads the work over every shard.
 *
 * @module
 */

import {
  ackCall,
  type BatchSettler,
  FencedError,
  fetchCall,
  FetchedBatch,
  type FetchedFields,
  fieldsOfReply,
  type ShardFetchOptions,
} from "./batch.ts";
import type { DeadLetter } from "./dead_letters.ts";
import type { UserEnvelope } from "./envelope.ts";
import type { QueueKeys } from "./keys.ts";
import { runScript } from "./lua_script.ts";
import {
  ACK,
  defineQueueScripts,
  FETCH,
  type FetchReply,
  HAND_BACK,
  HEARTBEAT,
  RECOVER,
  type RedisClient,
  REGISTER,
} from "./scripts.ts";
import {
  type FittingOptions,
  type OnceOptions,
  type PushOptions,
  ShardPushes,
} from "./shard_pushes.ts";

/** Counts of every list of the queue, for tests, benchmarks and operators. */
export interface QueueDepth {
  readonly queued: number;
  readonly retry: number;
  readonly dead: number;
  readonly processing: number;
}

/** Options of {@linkcode RedisQueue}: its keys and how its pushes are bounded. */
export interface RedisQueueOptions extends PushOptions {
  /** The shard's keys (`keys.ts`). */
  readonly keys: QueueKeys;
}

/** The queue's operations; `redis` may be shared by many callers. */
export class RedisQueue {
  readonly #redis: RedisClient;
  /** The API's side: every push (`shard_pushes.ts`). */
  readonly #pushes: ShardPushes;
  readonly keys: QueueKeys;

  constructor(redis: RedisClient, options: RedisQueueOptions) {
    // Before any pipeline is made from it: a pipeline knows only the scripts its client had.
    defineQueueScripts(redis);
    this.#redis = redis;
    this.#pushes = new ShardPushes(redis, options);
    this.keys = options.keys;
  }

  /** See {@linkcode ShardPushes.enqueue}. */
  enqueue(maxLength: number, ...users: readonly UserEnvelope[]): Promise<void> {
    return this.#pushes.enqueue(maxLength, ...users);
  }

  /** See {@linkcode ShardPushes.enqueueOnce}. */
  enqueueOnce(user: UserEnvelope, options: OnceOptions): Promise<string> {
    return this.#pushes.enqueueOnce(user, options);
  }

  /** See {@linkcode ShardPushes.enqueueFitting}. */
  enqueueFitting(users: readonly UserEnvelope[], options: FittingOptions): Promise<number> {
    return this.#pushes.enqueueFitting(users, options);
  }

  /** Registers a consumer and starts its heartbeat. */
  async register(consumerId: string, ttlMs: number): Promise<void> {
    await runScript(this.#redis, {
      script: REGISTER,
      keys: { consumers: this.keys.consumers, heartbeat: this.keys.heartbeatPrefix + consumerId },
      args: { consumerId, ttlMs },
    });
  }

  /**
   * Extends a consumer's heartbeat; rejects with {@linkcode FencedError}
   * (extending nothing) when it was fenced and must re-register.
   */
  async heartbeat(consumerId: string, ttlMs: number): Promise<void> {
    const alive = await runScript(this.#redis, {
      script: HEARTBEAT,
      keys: { consumers: this.keys.consumers, heartbeat: this.keys.heartbeatPrefix + consumerId },
      args: { consumerId, ttlMs },
    });
    if (alive !== 1) throw new FencedError(consumerId);
  }

  /**
   * Moves up to `max` items into the consumer's processing list and returns
   * them oldest first, as a batch to acknowledge; an empty batch when there
   * is nothing; rejects with {@linkcode FencedError} when the consumer is
   * fenced. `held` is how many items the consumer holds unacknowledged (the
   * batch it is storing while it fetches the next one); whatever else the
   * list holds came from a fetch whose reply was lost, and is returned again
   * instead of new items.
   */
  async fetch(options: ShardFetchOptions): Promise<FetchedBatch> {
    // Never confirmed on replicas (WAIT): a failover that undoes the move only delivers its
    // items again, which the idempotent insert absorbs (`server-consumer/main.ts`).
    const reply = await runScript(this.#redis, { script: FETCH, ...fetchCall(this.keys, options) });
    return this.#handle(fieldsOfReply(reply, options.consumerId));
  }

  /** {@linkcode FetchedBatch.ackAndFetch} fetches in the acknowledgement's call, always. */
  readonly fetchesWithAck = true;

  /** A batch this shard handed out, acknowledged here (`lua/ack.lua`). */
  #handle(fields: FetchedFields): FetchedBatch {
    const settler: BatchSettler = {
      ack: async (outcome) => {
        const reply = await runScript(this.#redis, {
          script: ACK,
          ...ackCall(this.keys, { batch, outcome }),
        });
        if (reply !== 1) throw new FencedError(batch.consumerId);
      },
      ackAndFetch: async (outcome, next) => {
        const call = ackCall(this.keys, { batch, outcome, next });
        const reply = await runScript(this.#redis, { script: ACK, ...call });
        if (reply === 0) throw new FencedError(batch.consumerId);
        return this.#handle(fieldsOfReply(reply as FetchReply, batch.consumerId));
      },
    };
    const batch = new FetchedBatch(fields, settler);
    return batch;
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
    const [recovered, buried, consumers] = await runScript(this.#redis, {
      script: RECOVER,
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
    return runScript(this.#redis, {
      script: HAND_BACK,
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
