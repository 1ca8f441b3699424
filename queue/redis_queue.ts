/**
 * One shard of the queue over Redis (`keys.ts`): the API's pushes
 * (`shard_pushes.ts`), the consumer's moves (register, heartbeat, fetch,
 * acknowledge, recover, hand back) and the status index's lookup. Each move
 * is one Lua script (`lua/`), so a crash between two commands can never leave
 * an item in no list or in two, and each keeps the status index in step with
 * the items. A consumer whose heartbeat expired is fenced: its fetches,
 * acknowledgements and heartbeats reject with {@linkcode FencedError}. Only
 * pushes wait for replicas (`confirmed_write.ts`); why the consumer's moves
 * need not: `docs/scaling.md#failover-and-redis_wait_replicas`.
 *
 * What these moves guarantee: `docs/delivery.md#how-the-code-keeps-it`.
 * `sharded_queue.ts` spreads the work over every shard.
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
   * fenced. `held` is how many items the consumer holds unacknowledged
   * (`lua/fetch.lua` says why).
   */
  async fetch(options: ShardFetchOptions): Promise<FetchedBatch> {
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
   * registered consumers, then passes the script their keys (`lua/recover.lua`).
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
