/**
 * The queue over all of its shards (QUEUE_SHARDS, `keys.ts`), the one the
 * API and the consumer use: each shard's pushes (`shard_pushes.ts`) and the
 * consumer's moves (register, heartbeat, fetch, acknowledge, recover, hand
 * back), each one Lua script (`lua/`) in one shard. A user's shard is chosen
 * by its id (`shardOf`), and everything that happens to it stays there. A
 * consumer is one id registered in every shard and serves them all: each
 * fetch starts at the next shard in turn, so none starves, and each batch is
 * acknowledged in its shard. A consumer whose heartbeat expired is fenced:
 * its moves reject with {@linkcode FencedError}.
 *
 * A batch taken ahead may come from another shard than the one in hand, so a
 * fetch tells the shard of the last batch how many items the consumer holds,
 * and every other shard that it holds items elsewhere: no shard then hands
 * it a recovered item, which is only ever held alone. What this keeps:
 * `docs/delivery.md#how-the-code-keeps-it`, and `docs/scaling.md#shards`.
 *
 * @module
 */

import calculateSlot from "cluster-key-slot";
import { v7 as uuidv7 } from "uuid";
import {
  ackCall,
  FencedError,
  fetchCall,
  FetchedBatch,
  type FetchedFields,
  type FetchOptions,
  fieldsOfReply,
  type ShardFetchOptions,
} from "./batch.ts";
import { ConfirmedWrites } from "./confirmed_write.ts";
import type { DeadLetter } from "./dead_letters.ts";
import type { UserEnvelope } from "./envelope.ts";
import { type QueueKeys, shardOf } from "./keys.ts";
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
import { type OnceOptions, type PushOptions, ShardPushes } from "./shard_pushes.ts";

/** Options of {@linkcode ShardedQueue}: its shards' keys and how its pushes are bounded. */
export interface ShardedQueueOptions extends PushOptions {
  /** Every shard's keys, shard 0 first (`queueShards`). */
  readonly keys: readonly QueueKeys[];
}

/** Options of {@linkcode ShardedQueue.enqueueBatch}. */
export interface BatchOptions {
  /** The most items the whole queue may hold; each shard holds at most its share. */
  readonly maxLength: number;
  /** When the batch asked to be queued: each push's deadline counts from it. @default now */
  readonly since?: number;
  /**
   * Races each shard's call against the caller's own deadline.
   * @default no bound of the caller's
   */
  readonly bound?: <T>(work: Promise<T>) => Promise<T>;
}

/** Every shard of one queue; `redis` may be shared by many callers. */
export class ShardedQueue {
  /** Each shard's pushes, shard 0 first: the API groups its pushes per shard. */
  readonly pushes: readonly ShardPushes[];
  /** Every shard's keys, shard 0 first. */
  readonly keys: readonly QueueKeys[];
  readonly #redis: RedisClient;
  /** Where the next fetch starts. */
  #next = 0;
  /** The shard of the last non-empty batch returned: where the items a consumer holds are. */
  #holdingShard = 0;

  constructor(redis: RedisClient, { keys, ...options }: ShardedQueueOptions) {
    if (keys.length === 0) throw new RangeError("Cannot make a queue of no shards");
    // Before any pipeline is made from it: a pipeline knows only the scripts its client had.
    defineQueueScripts(redis);
    this.#redis = redis;
    this.keys = keys;
    // One set of lanes for every shard: shards on one master share its WAIT in flight.
    const confirmedWrites = options.confirmedWrites ?? new ConfirmedWrites(redis, {
      replicas: options.waitReplicas ?? 0,
      timeoutMs: options.waitTimeoutMs ?? 200,
    });
    this.pushes = keys.map((shard) =>
      new ShardPushes(redis, { keys: shard, ...options, confirmedWrites })
    );
  }

  /** The shard (its index) a user with this id belongs to. */
  shardIndexOf(id: string): number {
    return shardOf(id, this.keys.length);
  }

  /** The shard (its index) an `Idempotency-Key`'s record, and so its user, belongs to. */
  shardIndexOfKey(key: string): number {
    return this.keys.length === 1 ? 0 : calculateSlot(key) % this.keys.length;
  }

  /**
   * A UUIDv7 for a request with idempotency `key`, whose user must be in the
   * key's shard (the record and the push are one step there): the shard of
   * an id is its millisecond (`shardOf`), so this id's is moved forward by the
   * fewest ms (less than the shard count) that land it there.
   */
  idForKey(key: string, now: number = Date.now()): string {
    const shards = this.keys.length;
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
      maxLength: Math.ceil(options.maxLength / this.keys.length),
    });
  }

  /**
   * Queues `users`, all or none, once for `options.key` (see
   * {@linkcode ShardPushes.enqueueAllOnce}): every id must be one
   * {@linkcode idForKey} minted for the key, so the whole batch is one script call in the key's
   * shard, atomic. Resolves with the ids the key is queued under, in order.
   */
  enqueueBatchOnce(users: readonly UserEnvelope[], options: OnceOptions): Promise<string[]> {
    const shard = this.shardIndexOfKey(options.key);
    const stray = users.find((user) => this.shardIndexOf(user.id) !== shard);
    if (stray !== undefined) {
      throw new RangeError(`Cannot queue ${stray.id} for its key: not an id of the key's shard`);
    }
    return this.pushes[shard]!.enqueueAllOnce(users, {
      ...options,
      maxLength: Math.ceil(options.maxLength / this.keys.length),
    });
  }

  /**
   * Queues `users`, grouped by the shard of their ids: one script call per shard, which pushes
   * that shard's users all or none ({@linkcode ShardPushes.enqueueWhole}) under the shard's share
   * of `maxLength`, the calls side by side. Resolves, once every call settled, with each user's
   * outcome in order: `undefined` when queued, else the error of its shard's call
   * (`QueueFullError`, `WriteUnconfirmedError`, or Redis' failure). `options.bound` races each
   * call (the caller's answer deadline): its rejection stands for the call's outcome.
   */
  async enqueueBatch(
    users: readonly UserEnvelope[],
    options: BatchOptions,
  ): Promise<unknown[]> {
    const { maxLength, since = Date.now(), bound = (work) => work } = options;
    const byShard = new Map<number, UserEnvelope[]>();
    for (const user of users) {
      const shard = this.shardIndexOf(user.id);
      const group = byShard.get(shard);
      if (group === undefined) byShard.set(shard, [user]);
      else group.push(user);
    }
    const share = Math.ceil(maxLength / this.keys.length);
    const failures = new Map<number, unknown>();
    await Promise.all(
      [...byShard].map(async ([shard, group]) => {
        try {
          await bound(this.pushes[shard]!.enqueueWhole(group, { maxLength: share, since }));
        } catch (error) {
          failures.set(shard, error);
        }
      }),
    );
    return users.map((user) => failures.get(this.shardIndexOf(user.id)));
  }

  /** Registers a consumer in every shard and starts its heartbeats. */
  async register(consumerId: string, ttlMs: number): Promise<void> {
    await Promise.all(this.keys.map((keys) =>
      runScript(this.#redis, {
        script: REGISTER,
        keys: { consumers: keys.consumers, heartbeat: keys.heartbeatPrefix + consumerId },
        args: { consumerId, ttlMs },
      })
    ));
  }

  /**
   * Extends the consumer's heartbeat in every shard; rejects with
   * {@linkcode FencedError} when it was fenced in any.
   */
  async heartbeat(consumerId: string, ttlMs: number): Promise<void> {
    await Promise.all(this.keys.map(async (keys) => {
      const alive = await runScript(this.#redis, {
        script: HEARTBEAT,
        keys: { consumers: keys.consumers, heartbeat: keys.heartbeatPrefix + consumerId },
        args: { consumerId, ttlMs },
      });
      if (alive !== 1) throw new FencedError(consumerId);
    }));
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
    const count = this.keys.length;
    const start = this.#next;
    this.#next = (start + 1) % count;
    let failure: { error: unknown } | undefined;
    for (let i = 0; i < count; i++) {
      const shard = (start + i) % count;
      const holdsHere = shard === this.#holdingShard;
      let batch: FetchedBatch;
      try {
        batch = await this.#fetchShard(shard, {
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
        return batch;
      }
      if (batch.items.length > 0) {
        this.#holdingShard = shard;
        return batch;
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
    return this.keys.length === 1;
  }

  /** One shard's fetch (`lua/fetch.lua`). */
  async #fetchShard(shard: number, options: ShardFetchOptions): Promise<FetchedBatch> {
    const call = fetchCall(this.keys[shard]!, options);
    const reply = await runScript(this.#redis, { script: FETCH, ...call });
    return this.#inShard(fieldsOfReply(reply, options.consumerId), shard);
  }

  /** A batch taken from shard `shard`, acknowledged there (`lua/ack.lua`). */
  #inShard(fields: FetchedFields, shard: number): FetchedBatch {
    const keys = this.keys[shard]!;
    const batch: FetchedBatch = new FetchedBatch({ ...fields, shard }, {
      ack: async (outcome) => {
        const reply = await runScript(this.#redis, {
          script: ACK,
          ...ackCall(keys, { batch, outcome }),
        });
        if (reply !== 1) throw new FencedError(batch.consumerId);
      },
      ackAndFetch: async (outcome, next) => {
        if (!this.fetchesWithAck) {
          await batch.ack(outcome);
          return this.fetch({ consumerId: batch.consumerId, ...next });
        }
        const call = ackCall(keys, { batch, outcome, next });
        const reply = await runScript(this.#redis, { script: ACK, ...call });
        if (reply === 0) throw new FencedError(batch.consumerId);
        return this.#inShard(fieldsOfReply(reply as FetchReply, batch.consumerId), shard);
      },
    });
    return batch;
  }

  /**
   * Recovers dead consumers' work in every shard. `consumers` is the most
   * found dead in one shard (each consumer is registered in every shard).
   */
  async recover(maxCrashes: number, now: Date = new Date()) {
    const results = await Promise.all(this.keys.map(async (keys) => {
      // The registered consumers first: the script is passed their keys (`lua/recover.lua`).
      const ids = await this.#redis.smembers(keys.consumers);
      if (ids.length === 0) return [0, 0, 0] as const;
      return runScript(this.#redis, {
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
    }));
    return {
      recovered: results.reduce((sum, [recovered]) => sum + recovered, 0),
      buried: results.reduce((sum, [, buried]) => sum + buried, 0),
      consumers: Math.max(...results.map(([, , consumers]) => consumers)),
    };
  }

  /**
   * Hands back what the consumer holds in every shard and unregisters it;
   * rejects if any shard failed (what that shard held is recovered once the
   * heartbeat expires), after trying them all.
   */
  async handBack(consumerId: string): Promise<number> {
    const results = await Promise.allSettled(this.keys.map((keys) =>
      runScript(this.#redis, {
        script: HAND_BACK,
        keys: {
          consumers: keys.consumers,
          heartbeat: keys.heartbeatPrefix + consumerId,
          processing: keys.processingPrefix + consumerId,
          queue: keys.queue,
          deliveries: keys.deliveries,
          stats: keys.stats,
        },
        args: { consumerId },
      })
    ));
    const failed = results.find((result) => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    return results.reduce((sum, r) => sum + (r.status === "fulfilled" ? r.value : 0), 0);
  }

  /**
   * The user's entry in the status index of its shard: `"queued"`, its dead
   * letter, or undefined when the id is not there (stored, never accepted,
   * or purged).
   */
  async indexed(id: string): Promise<"queued" | DeadLetter | undefined> {
    const keys = this.keys[this.shardIndexOf(id)]!;
    // One MULTI, so both are read at one instant: read apart, a requeue in
    // between could make a dead user look absent from both.
    const [[, queued], [, dead]] = (await this.#redis.multi()
      .sismember(keys.queuedIds, id)
      .hget(keys.deadIds, id)
      .exec()) as [[null, number], [null, string | null]];
    if (queued === 1) return "queued";
    return dead === null ? undefined : JSON.parse(dead) as DeadLetter;
  }
}
