/**
 * One shard of the queue (`keys.ts`): the consumer's moves (register,
 * heartbeat, fetch, acknowledge, recover, hand back) and the status index's
 * lookup, each one Lua script (`lua/`). Internal: {@linkcode ShardedQueue}
 * is the public queue. What the moves guarantee:
 * `docs/delivery.md#how-the-code-keeps-it`.
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

/** The consumer's moves in the shard at `keys`; `redis` may be shared by many callers. */
export class RedisQueue {
  readonly #redis: RedisClient;
  readonly keys: QueueKeys;

  constructor(redis: RedisClient, keys: QueueKeys) {
    // Before any pipeline is made from it: a pipeline knows only the scripts its client had.
    defineQueueScripts(redis);
    this.#redis = redis;
    this.keys = keys;
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
}
