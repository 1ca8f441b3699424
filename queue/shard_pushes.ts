/**
 * The pushes of one shard: the API's side of the queue
 * (`docs/delivery.md#how-the-code-keeps-it`). Each push is one script that
 * pushes the users and marks them queued in the status index, does nothing
 * once past its deadline (`enqueueWithinMs`), and is followed by `WAIT`
 * when replicas must confirm it (`confirmed_write.ts`).
 *
 * @module
 */

import { ConfirmedWrites, WriteUnconfirmedError } from "./confirmed_write.ts";
import { encodeEnvelope, type UserEnvelope } from "./envelope.ts";
import type { QueueKeys } from "./keys.ts";
import type { CallOf, LuaScript } from "./lua_script.ts";
import { IdempotencyConflictError, QueueFullError } from "./push_errors.ts";
import { defineQueueScripts, ENQUEUE, ENQUEUE_ONCE, type RedisClient } from "./scripts.ts";

/** How a queue's pushes are bounded, for one shard or every shard. */
export interface PushOptions {
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
  /**
   * The confirmed writes of every shard on `redis`, made with the same
   * `waitReplicas` and `waitTimeoutMs`, so that shards sharing a master share
   * its one `WAIT` in flight (`confirmed_write.ts`). @default this shard's own
   */
  readonly confirmedWrites?: ConfirmedWrites;
}

/** Options of {@linkcode ShardPushes.enqueueFitting} and {@linkcode ShardPushes.enqueueWhole}. */
export interface FittingOptions {
  /** The most items the list may hold after the push. */
  readonly maxLength: number;
  /** When the earliest of the users asked to be queued: the deadline counts from it. @default now */
  readonly since?: number;
}

/** Options of {@linkcode ShardPushes.enqueueOnce}. */
export interface OnceOptions {
  /** The client's `Idempotency-Key`. */
  readonly key: string;
  /** The most items the list may hold after the push. */
  readonly maxLength: number;
  /** How long the key's record lives from the push. */
  readonly ttlSeconds: number;
}

/** The pushes of the shard at `keys`; `redis` may be shared by many callers. */
export class ShardPushes {
  readonly #enqueueWithinMs: number;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /** The pushes, one `WAIT` in flight at a time per node (`confirmed_write.ts`). */
  readonly #confirmedWrites: ConfirmedWrites;
  readonly keys: QueueKeys;

  constructor(
    redis: RedisClient,
    { keys, ...options }: PushOptions & { readonly keys: QueueKeys },
  ) {
    // Before any pipeline is made from it: a pipeline knows only the scripts its client had.
    defineQueueScripts(redis);
    this.#enqueueWithinMs = options.enqueueWithinMs ?? 0;
    this.#waitReplicas = options.waitReplicas ?? 0;
    this.#waitTimeoutMs = options.waitTimeoutMs ?? 200;
    this.#confirmedWrites = options.confirmedWrites ?? new ConfirmedWrites(redis, {
      replicas: this.#waitReplicas,
      timeoutMs: this.#waitTimeoutMs,
    });
    this.keys = keys;
  }

  /** A push's script, followed by `WAIT` when replicas must confirm it (`confirmed_write.ts`). */
  #confirmed<S extends LuaScript>(script: S, call: CallOf<S>) {
    return this.#confirmedWrites.run(script, call);
  }

  /** The error of a push `WAIT` did not confirm on enough replicas. */
  #unconfirmed(replicas: number, pushed: number): WriteUnconfirmedError {
    return new WriteUnconfirmedError("push", {
      wanted: this.#waitReplicas,
      confirmed: replicas,
      timeoutMs: this.#waitTimeoutMs,
      pushed,
    });
  }

  /**
   * Queues `user` once for the client's idempotency `key`: {@linkcode enqueueAllOnce} for one user.
   * Resolves with the id the key is queued under.
   */
  async enqueueOnce(user: UserEnvelope, options: OnceOptions): Promise<string> {
    const [id] = await this.enqueueAllOnce([user], options);
    return id!;
  }

  /**
   * Queues `users`, all or none, once for the client's idempotency `key`, under the key's record
   * (see `lua/enqueue_once.lua`): the push and the record in one step. Resolves with the ids the
   * key is queued under, in order: these users' if this call pushed them, or those of the earlier
   * request with the same key and names; rejects with {@linkcode IdempotencyConflictError} when
   * that earlier request named other users, with {@linkcode QueueFullError} when the list cannot
   * take them all under `maxLength`. The record lives `ttlSeconds` from the push.
   */
  async enqueueAllOnce(
    users: readonly UserEnvelope[],
    { key, maxLength, ttlSeconds }: OnceOptions,
  ): Promise<string[]> {
    const since = Date.now();
    const deadline = this.#enqueueWithinMs > 0 ? since + this.#enqueueWithinMs : 0;
    const [reply, replicas] = await this.#confirmed(ENQUEUE_ONCE, {
      keys: {
        queue: this.keys.queue,
        queuedIds: this.keys.queuedIds,
        record: this.keys.idempotencyPrefix + key,
      },
      args: { deadline, maxLength, ttlSeconds, count: users.length },
      restArgs: [
        ...users.map(encodeEnvelope),
        ...users.map((user) => user.id),
        ...users.map((user) => user.name),
      ],
    });
    if (reply === -2) throw this.#tooLate();
    if (reply === 0) throw new QueueFullError(maxLength);
    const [status, joined] = reply;
    const ids = joined.split(" ");
    if (status === 3) throw new IdempotencyConflictError(ids[0]!);
    if (replicas < this.#waitReplicas) {
      const error = this.#unconfirmed(replicas, status === 1 ? users.length : 0);
      error.queuedAs = ids[0];
      error.queuedAsAll = ids;
      throw error;
    }
    return ids;
  }

  /**
   * Pushes all of `users` or, when they do not fit under `maxLength` together, none (rejecting
   * with {@linkcode QueueFullError}), as one atomic step; resolves once Redis acknowledged it. The
   * deadline (`enqueueWithinMs`) counts from `since`.
   */
  async enqueueWhole(
    users: readonly UserEnvelope[],
    { maxLength, since = Date.now() }: FittingOptions,
  ): Promise<void> {
    const pushed = await this.#enqueue(users, { maxLength, since, whole: true });
    if (pushed < users.length) throw new QueueFullError(maxLength);
  }

  /**
   * Pushes as many of `users`, from the first, as fit under `maxLength`, as
   * one atomic step, and resolves with how many that was, once Redis
   * acknowledged it. The deadline (`enqueueWithinMs`) counts from
   * `since`, when the earliest of them asked to be queued.
   */
  enqueueFitting(
    users: readonly UserEnvelope[],
    { maxLength, since = Date.now() }: FittingOptions,
  ): Promise<number> {
    return this.#enqueue(users, { maxLength, since, whole: false });
  }

  /** `lua/enqueue.lua`: how many of `users` it pushed (`whole`: all or none). */
  async #enqueue(
    users: readonly UserEnvelope[],
    { maxLength, since, whole }: { maxLength: number; since: number; whole: boolean },
  ): Promise<number> {
    const deadline = this.#enqueueWithinMs > 0 ? since + this.#enqueueWithinMs : 0;
    const [pushed, replicas] = await this.#confirmed(ENQUEUE, {
      keys: { queue: this.keys.queue, queuedIds: this.keys.queuedIds },
      args: { deadline, maxLength, count: users.length, whole: whole ? 1 : 0 },
      restArgs: [...users.map(encodeEnvelope), ...users.map((user) => user.id)],
    });
    if (pushed === -2) throw this.#tooLate();
    if (pushed > 0 && replicas < this.#waitReplicas) throw this.#unconfirmed(replicas, pushed);
    return pushed;
  }

  /** A push Redis ran after its deadline, which did nothing (`lua/includes/past_deadline.lua`). */
  #tooLate(): Error {
    return new Error(
      `Cannot enqueue as Redis ran the push too late: not within ${this.#enqueueWithinMs} ms`,
    );
  }
}
