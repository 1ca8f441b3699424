/**
 * The API's pushes, grouped: the users accepted while the previous call to Redis is in flight (or,
 * when none is, during one turn of the event loop) go to Redis in one call of the enqueue script.
 * Each call costs Redis and the client a fixed price (the script call, its `MULTI … EXEC` in the
 * append-only file, the reply, the client's bookkeeping) whatever it carries, so a group pays it
 * once (the figure is in docs/performance.md).
 *
 * Each request is answered as if it had been pushed alone:
 * - 202 only once Redis acknowledged the call that carried its user;
 * - a full queue refuses exactly the users that do not fit (the script's `fit` mode pushes the
 *   group in order and stops at the bound), with {@linkcode QueueFullError};
 * - the group's enqueue deadline counts from its earliest request, so a late call is void before
 *   any request of the group can have been answered 503 for being too slow;
 * - a failed call rejects every request of the group; one that fewer replicas than
 *   REDIS_WAIT_REPLICAS confirmed rejects those pushed with {@linkcode WriteUnconfirmedError}.
 *
 * One call is in flight at a time: the users that arrive meanwhile go as the next group once it
 * returns, or after `maxWaitMs` behind a call that stalls (their own deadline runs while they
 * wait). With shards ({@linkcode ShardedPushes}), each shard groups its own users.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import { after, type Clock, systemClock } from "@users-pipeline/runtime/clock";
import { QueueFullError, type UserEnvelope, WriteUnconfirmedError } from "@users-pipeline/queue";

/** What the grouping needs from the queue; `ShardPushes` provides it. */
export interface FittingQueue {
  enqueueFitting(
    users: readonly UserEnvelope[],
    options: { maxLength: number; since: number },
  ): Promise<number>;
}

/** Options of {@linkcode GroupedPushes}. */
export interface GroupedPushesOptions {
  /** The most items the queue may hold: a user that does not fit is refused. */
  readonly maxLength: number;
  /**
   * Most users per script call; a bigger group is sent as several calls, in
   * order, so one reply never grows without bound. @default 1000
   */
  readonly maxGroup?: number;
  /**
   * Runs the flush once the current turn is over. @default setImmediate,
   * which runs after the I/O callbacks of this turn: every request parsed in
   * it has had its chance to join.
   */
  readonly schedule?: (flush: () => void) => void;
  /** The clock of each request's start and of the wait behind a slow call. @default systemClock */
  readonly clock?: Clock;
  /**
   * Longest a group waits for the call in flight before it goes anyway.
   * @default 5
   */
  readonly maxWaitMs?: number;
}

interface Waiting {
  readonly user: UserEnvelope;
  readonly since: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/** Groups {@link GroupedPushes.enqueue} calls: one script call in flight at a time, or briefly more. */
export class GroupedPushes {
  readonly #queue: FittingQueue;
  readonly #maxLength: number;
  readonly #maxGroup: number;
  readonly #schedule: (flush: () => void) => void;
  readonly #clock: Clock;
  readonly #maxWaitMs: number;
  #waiting: Waiting[] = [];
  /** Calls in flight (the next flush happens when one settles, or once the wait is over). */
  #inFlight = 0;
  /** Sends the waiting group behind a call that is taking long. */
  #overtake: (() => void) | undefined;

  constructor(queue: FittingQueue, options: GroupedPushesOptions) {
    this.#queue = queue;
    this.#maxLength = options.maxLength;
    this.#maxGroup = options.maxGroup ?? 1000;
    this.#schedule = options.schedule ?? ((flush) => void setImmediate(flush));
    this.#clock = options.clock ?? systemClock;
    this.#maxWaitMs = options.maxWaitMs ?? 5;
  }

  /**
   * Queues `user` with the others of its group; resolves once Redis
   * acknowledged it, rejects with {@linkcode QueueFullError} when it did not
   * fit, or with the call's error.
   */
  enqueue(user: UserEnvelope): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.#waiting.length === 0) {
        if (this.#inFlight === 0) this.#schedule(() => this.#flush(false));
        else this.#armOvertake();
      }
      this.#waiting.push({ user, since: this.#clock.now(), resolve, reject });
    });
  }

  // A group waits behind a slow call for at most maxWaitMs: its own deadline
  // (the enqueue script's, from its earliest request) runs while it waits, so
  // waiting out a stalled call would turn one slow call into refusals.
  #armOvertake(): void {
    this.#overtake ??= after({ clock: this.#clock, ms: this.#maxWaitMs }, () => {
      this.#overtake = undefined;
      this.#flush(true);
    });
  }

  #flush(overtaking: boolean): void {
    if (this.#waiting.length === 0) return;
    if (this.#inFlight > 0 && !overtaking) {
      this.#armOvertake();
      return;
    }
    this.#overtake?.();
    this.#overtake = undefined;
    const group = this.#waiting.length <= this.#maxGroup
      ? this.#waiting
      : this.#waiting.splice(0, this.#maxGroup);
    if (group === this.#waiting) this.#waiting = [];
    this.#inFlight++;
    // #send never rejects: it settles every request of the group itself.
    void this.#send(group).finally(() => {
      this.#inFlight--;
      this.#flush(false);
    });
  }

  async #send(group: readonly Waiting[]): Promise<void> {
    let pushed: number;
    try {
      pushed = await this.#queue.enqueueFitting(group.map((waiting) => waiting.user), {
        maxLength: this.#maxLength,
        since: group[0]!.since,
      });
    } catch (error) {
      // Unconfirmed: those pushed get that error, the rest did not fit.
      const pushed = error instanceof WriteUnconfirmedError ? error.pushed : group.length;
      group.forEach((waiting, i) =>
        waiting.reject(i < pushed ? error : new QueueFullError(this.#maxLength))
      );
      return;
    }
    group.forEach((waiting, i) => {
      if (i < pushed) waiting.resolve();
      else waiting.reject(new QueueFullError(this.#maxLength));
    });
  }
}

/**
 * Options of {@linkcode ShardedPushes}: those of each shard's
 * {@linkcode GroupedPushes}, `maxLength` being the whole queue's.
 */
export interface ShardedPushesOptions extends GroupedPushesOptions {
  /** The shard (its index) a user with this id belongs to. */
  readonly shardOf: (id: string) => number;
}

/**
 * The pushes of a sharded queue: each user goes to the {@linkcode GroupedPushes}
 * of its shard (`shardOf`: the millisecond of its UUIDv7 id), whose bound is its share of the
 * whole queue's, `maxLength` / shards rounded up.
 */
export class ShardedPushes {
  readonly #shards: readonly GroupedPushes[];
  readonly #shardOf: (id: string) => number;

  constructor(
    queues: readonly FittingQueue[],
    { maxLength, shardOf, ...options }: ShardedPushesOptions,
  ) {
    const share = Math.ceil(maxLength / queues.length);
    this.#shards = queues.map((queue) =>
      new GroupedPushes(queue, { ...options, maxLength: share })
    );
    this.#shardOf = shardOf;
  }

  /** Queues `user` in its shard; see {@linkcode GroupedPushes.enqueue}. */
  enqueue(user: UserEnvelope): Promise<void> {
    return this.#shards[this.#shardOf(user.id)]!.enqueue(user);
  }
}
