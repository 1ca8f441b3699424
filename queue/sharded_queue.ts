/**
 * The queue, the one the API and the consumer use, over all of its shards
 * (QUEUE_SHARDS, `keys.ts`): each shard's pushes (`shard_pushes.ts`) and
 * moves (`redis_queue.ts`). A user's shard is chosen by its id
 * (`shardOf`), and everything that happens to it stays there. A consumer is
 * one id registered in every shard and serves them all: each fetch starts at
 * the next shard in turn and takes the first batch it finds, so none starves;
 * each batch comes from one shard and is acknowledged there.
 *
 * The batch a consumer takes ahead may come from another shard than the one
 * in hand. So a fetch tells the shard of the last batch returned how many
 * items the consumer holds, and every other shard that it holds items
 * elsewhere: no shard then hands it a recovered item, which is only ever held
 * alone. What this keeps: `docs/delivery.md#how-the-code-keeps-it`, and
 * `docs/scaling.md#shards`.
 *
 * @module
 */

import calculateSlot from "cluster-key-slot";
import { v7 as uuidv7 } from "uuid";
import type { UserEnvelope } from "./envelope.ts";
import { type QueueKeys, shardOf } from "./keys.ts";
import { FencedError, FetchedBatch, type FetchOptions } from "./batch.ts";
import { ConfirmedWrites } from "./confirmed_write.ts";
import { RedisQueue } from "./redis_queue.ts";
import { type OnceOptions, type PushOptions, ShardPushes } from "./shard_pushes.ts";
import type { RedisClient } from "./scripts.ts";

/** Options of {@linkcode ShardedQueue}: its shards' keys and how its pushes are bounded. */
export interface ShardedQueueOptions extends PushOptions {
  /** Every shard's keys, shard 0 first (`queueShards`). */
  readonly keys: readonly QueueKeys[];
}

/** Every shard of one queue. */
export class ShardedQueue {
  /** Each shard's pushes, shard 0 first: the API groups its pushes per shard. */
  readonly pushes: readonly ShardPushes[];
  /** Each shard's moves, shard 0 first. */
  readonly #shards: readonly RedisQueue[];
  /** Every shard's keys. */
  readonly keys: readonly QueueKeys[];
  /** Where the next fetch starts. */
  #next = 0;
  /** The shard of the last non-empty batch returned: where the items a consumer holds are. */
  #holdingShard = 0;

  constructor(redis: RedisClient, { keys, ...options }: ShardedQueueOptions) {
    if (keys.length === 0) throw new RangeError("Cannot make a queue of no shards");
    this.keys = keys;
    // One set of lanes for every shard: shards on one master share its WAIT in flight.
    const confirmedWrites = options.confirmedWrites ?? new ConfirmedWrites(redis, {
      replicas: options.waitReplicas ?? 0,
      timeoutMs: options.waitTimeoutMs ?? 200,
    });
    this.pushes = keys.map((shard) =>
      new ShardPushes(redis, { keys: shard, ...options, confirmedWrites })
    );
    this.#shards = keys.map((shard) => new RedisQueue(redis, shard));
  }

  /** The shard (its index) a user with this id belongs to. */
  shardIndexOf(id: string): number {
    return shardOf(id, this.#shards.length);
  }

  /** The shard (its index) an `Idempotency-Key`'s record, and so its user, belongs to. */
  shardIndexOfKey(key: string): number {
    return this.#shards.length === 1 ? 0 : calculateSlot(key) % this.#shards.length;
  }

  /**
   * A UUIDv7 for a request with idempotency `key`, whose user must be in the
   * key's shard (the record and the push are one step there): the shard of
   * an id is its millisecond (`shardOf`), so this id's is moved forward by the
   * fewest ms (less than the shard count) that land it there.
   */
  idForKey(key: string, now: number = Date.now()): string {
    const shards = this.#shards.length;
    const msecs = now + (this.shardIndexOfKey(key) - (now % shards) + shards) % shards;
    return uuidv7({ msecs });
  }

  /**
   * Queues `user` once for `key` (see {@linkcode ShardPushes.enqueueOnce}) in
   * the key's shard, under that shard's share of `maxLength`; the user's id
   * must be one {@linkcode idForKey} minted for the key.
   */
  enqueueOnce(user: UserEnvelope, options: OnceOptions): Promise<string> {
    const shard = this.shardIndexOfKey(options.key);
    if (this.shardIndexOf(user.id) !== shard) {
      throw new RangeError(`Cannot queue ${user.id} for its key: not an id of the key's shard`);
    }
    return this.pushes[shard]!.enqueueOnce(user, {
      ...options,
      maxLength: Math.ceil(options.maxLength / this.#shards.length),
    });
  }

  /** Registers a consumer in every shard and starts its heartbeats. */
  async register(consumerId: string, ttlMs: number): Promise<void> {
    await Promise.all(this.#shards.map((shard) => shard.register(consumerId, ttlMs)));
  }

  /**
   * Extends the consumer's heartbeat in every shard; rejects with
   * {@linkcode FencedError} when it was fenced in any.
   */
  async heartbeat(consumerId: string, ttlMs: number): Promise<void> {
    await Promise.all(this.#shards.map((shard) => shard.heartbeat(consumerId, ttlMs)));
  }

  /**
   * Up to `max` items of one shard, oldest first: the first shard with any,
   * starting from the one after where the previous fetch started; an empty
   * batch when every shard is empty; rejects with `FencedError` when the
   * consumer is fenced in a shard it looked at. The batch is acknowledged in
   * its shard.
   *
   * `held` is how many items the consumer holds unacknowledged: the last
   * batch returned (see the module's notes).
   *
   * A shard that fails (its master failing over, say) is passed over, so the
   * others keep being served; the fetch rejects with that failure only when
   * no other shard had items (the caller then backs off and retries). What
   * the failed call may have taken stays in that shard's processing list,
   * and the next fetch there returns it.
   */
  async fetch({ consumerId, max, held = 0 }: FetchOptions): Promise<FetchedBatch> {
    const count = this.#shards.length;
    const start = this.#next;
    this.#next = (start + 1) % count;
    let failure: { error: unknown } | undefined;
    for (let i = 0; i < count; i++) {
      const shard = (start + i) % count;
      const holdsHere = shard === this.#holdingShard;
      let batch: FetchedBatch;
      try {
        batch = await this.#shards[shard]!.fetch({
          consumerId,
          max,
          held: holdsHere ? held : 0,
          holdingElsewhere: held > 0 && !holdsHere,
        });
      } catch (error) {
        if (error instanceof FencedError) throw error;
        failure ??= { error };
        continue;
      }
      if (batch.suspectWaiting) {
        // Taken by the next fetch, made holding nothing: start it here, so other
        // shards' backlogs never starve recovered items.
        this.#next = shard;
        return this.#inShard(batch, shard);
      }
      if (batch.items.length > 0) {
        this.#holdingShard = shard;
        return this.#inShard(batch, shard);
      }
    }
    if (failure !== undefined) throw failure.error;
    return new FetchedBatch({ items: [], fromRetry: false, consumerId }, {
      ack: () => Promise.resolve(),
      ackAndFetch: (_, next) => this.fetch({ consumerId, ...next }),
    });
  }

  /**
   * True when {@linkcode FetchedBatch.ackAndFetch} fetches in the
   * acknowledgement's script call: with one shard. With several, the next
   * batch may be another shard's, so it takes a fetch of its own, which
   * keeps every shard's turn.
   */
  get fetchesWithAck(): boolean {
    return this.#shards.length === 1;
  }

  /** `batch`, taken from shard `shard`, acknowledged there. */
  #inShard(batch: FetchedBatch, shard: number): FetchedBatch {
    const { items, fromRetry, suspectWaiting, consumerId } = batch;
    return new FetchedBatch({ items, fromRetry, suspectWaiting, consumerId, shard }, {
      ack: (outcome) => batch.ack(outcome),
      ackAndFetch: async (outcome, next) => {
        if (this.fetchesWithAck) return this.#inShard(await batch.ackAndFetch(outcome, next), 0);
        await batch.ack(outcome);
        return this.fetch({ consumerId, ...next });
      },
    });
  }

  /**
   * Recovers dead consumers' work in every shard. `consumers` is the most
   * found dead in one shard (each consumer is registered in every shard).
   */
  async recover(maxCrashes: number, now: Date = new Date()) {
    const results = await Promise.all(this.#shards.map((shard) => shard.recover(maxCrashes, now)));
    return {
      recovered: results.reduce((sum, r) => sum + r.recovered, 0),
      buried: results.reduce((sum, r) => sum + r.buried, 0),
      consumers: Math.max(...results.map((r) => r.consumers)),
    };
  }

  /**
   * Hands back what the consumer holds in every shard and unregisters it;
   * rejects if any shard failed (what that shard held is recovered once the
   * heartbeat expires), after trying them all.
   */
  async handBack(consumerId: string): Promise<number> {
    const results = await Promise.allSettled(
      this.#shards.map((shard) => shard.handBack(consumerId)),
    );
    const failed = results.find((result) => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    return results.reduce((sum, r) => sum + (r.status === "fulfilled" ? r.value : 0), 0);
  }

  /** The user's entry in the status index of its shard (see `RedisQueue.indexed`). */
  indexed(id: string): ReturnType<RedisQueue["indexed"]> {
    return this.#shards[this.shardIndexOf(id)]!.indexed(id);
  }
}
