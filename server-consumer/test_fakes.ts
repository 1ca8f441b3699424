/**
 * Fakes for the consumer's unit tests: a clock that moves only when the test
 * says so, the queue's contract in memory, and the users table in a Map.
 *
 * @module
 */

import {
  type AckOutcome,
  type DeadLetter,
  encodeEnvelope,
  FencedError,
  FetchedBatch,
  type FetchOptions,
  type NextFetch,
} from "@users-pipeline/queue";
import type { Clock } from "@users-pipeline/runtime/clock";
import type { ConsumerOptions } from "./consumer.ts";
import type { UserStore } from "./user_writer.ts";

type Queue = ConsumerOptions["queue"];

export interface FakeTimer {
  at: number;
  readonly every?: number;
  readonly fire: () => void;
}

/**
 * Time that moves only when the test says so: `advance()` jumps to the next
 * pending timer and fires it, so a five-second backoff costs nothing.
 */
export class FakeClock implements Clock {
  #now = 0;
  #timers: FakeTimer[] = [];

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = { at: this.#now + ms, fire: resolve };
      this.#timers.push(timer);
      signal?.addEventListener("abort", () => {
        this.#timers = this.#timers.filter((t) => t !== timer);
        resolve();
      }, { once: true });
    });
  }

  every(ms: number, tick: () => void): () => void {
    const timer = { at: this.#now + ms, every: ms, fire: tick };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Timers not yet fired (intervals count until cancelled). */
  get pending(): number {
    return this.#timers.length;
  }

  /** Moves to the earliest timer and fires it; false when there is none. */
  advance(): boolean {
    const next = this.#timers.reduce<FakeTimer | undefined>(
      (earliest, t) => earliest === undefined || t.at < earliest.at ? t : earliest,
      undefined,
    );
    if (next === undefined) return false;
    this.#now = Math.max(this.#now, next.at);
    if (next.every === undefined) this.#timers = this.#timers.filter((t) => t !== next);
    else next.at += next.every;
    next.fire();
    return true;
  }
}

/** Lets every pending promise callback run (a zero-delay turn: nothing waits). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** Steps the clock until `done()` holds; fails if it never does. */
export async function until(clock: FakeClock, done: () => boolean, what: string): Promise<void> {
  for (let step = 0; step < 10_000; step++) {
    await settle();
    if (done()) return;
    if (!clock.advance()) break;
  }
  throw new Error(`Cannot see ${what} as time ran out: current fake time is ${clock.now()} ms`);
}

/**
 * The queue's contract in memory: a member set for fencing, each consumer's
 * held items oldest first (its processing list), and recovery as a move of a
 * fenced consumer's items back to the list.
 */
export class MemoryQueue implements Queue {
  readonly items: string[] = [];
  readonly members = new Set<string>();
  readonly held = new Map<string, string[]>();
  /** The `held` count of each fetch, in order. */
  readonly fetchHeld: number[] = [];
  readonly dead: DeadLetter[] = [];
  /** The ids acknowledged as stored, in order. */
  readonly storedIds: string[] = [];
  readonly registered: string[] = [];
  /** Errors the next fetches throw, one per call. */
  readonly fetchFailures: Error[] = [];
  /** Like a frozen Redis: acknowledgements and hand-backs never answer. */
  frozen = false;
  readonly fetchesWithAck = true;
  /** The `held` count of each fetch carried by an acknowledgement, in order. */
  readonly ackFetchHeld: number[] = [];

  push(...payloads: string[]): void {
    this.items.push(...payloads);
  }

  /** What the others do once a consumer's heartbeat expired: unregister it, recover its batch. */
  fence(consumerId: string): void {
    this.members.delete(consumerId);
    const held = this.held.get(consumerId) ?? [];
    this.held.delete(consumerId);
    this.items.unshift(...held);
  }

  register(consumerId: string): Promise<void> {
    this.members.add(consumerId);
    this.registered.push(consumerId);
    return Promise.resolve();
  }

  heartbeat(consumerId: string): Promise<void> {
    if (!this.members.has(consumerId)) return Promise.reject(new FencedError(consumerId));
    return Promise.resolve();
  }

  fetch({ consumerId, max, held = 0 }: FetchOptions): Promise<FetchedBatch> {
    this.fetchHeld.push(held);
    const failure = this.fetchFailures.shift();
    if (failure !== undefined) return Promise.reject(failure);
    if (!this.members.has(consumerId)) return Promise.reject(new FencedError(consumerId));
    return Promise.resolve(this.#take(consumerId, { max, held }));
  }

  /** A fetch by a registered consumer. */
  #take(consumerId: string, { max, held = 0 }: NextFetch): FetchedBatch {
    const list = this.held.get(consumerId) ?? [];
    this.held.set(consumerId, list);
    // Beyond what the consumer says it holds: a fetch whose reply it never got.
    const items = list.length > held ? list.slice(held) : this.items.splice(0, max);
    if (list.length <= held) list.push(...items);
    const batch: FetchedBatch = new FetchedBatch({ items, fromRetry: false, consumerId }, {
      ack: (outcome) => this.#ack(batch, outcome),
      ackAndFetch: async (outcome, next) => {
        await this.#ack(batch, outcome);
        this.ackFetchHeld.push(next.held ?? 0);
        return this.#take(consumerId, next);
      },
    });
    return batch;
  }

  #ack(batch: FetchedBatch, { storedIds = [], deadLetters = [] }: AckOutcome): Promise<void> {
    if (this.frozen) return new Promise(() => {});
    if (!this.members.has(batch.consumerId)) {
      return Promise.reject(new FencedError(batch.consumerId));
    }
    this.held.get(batch.consumerId)?.splice(0, batch.items.length);
    this.dead.push(...deadLetters);
    this.storedIds.push(...storedIds);
    return Promise.resolve();
  }

  recover(): Promise<{ recovered: number; buried: number; consumers: number }> {
    return Promise.resolve({ recovered: 0, buried: 0, consumers: 0 });
  }

  handBack(consumerId: string): Promise<number> {
    if (this.frozen) return new Promise(() => {});
    const items = this.held.get(consumerId) ?? [];
    this.held.delete(consumerId);
    this.members.delete(consumerId);
    this.items.unshift(...items);
    return Promise.resolve(items.length);
  }
}

/** A PostgreSQL error as postgres.js raises it: what matters is `code`. */
export function pgError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/**
 * Table `users` in a Map. Like PostgreSQL with the table's CHECK constraint,
 * it refuses a whole statement when a name contains "bad".
 */
export class MemoryStore implements UserStore {
  readonly rows = new Map<string, string>();
  /** Errors the next inserts throw, one per call (`Infinity` of them with `failForever`). */
  readonly failures: Error[] = [];
  failForever: Error | undefined;
  /** Like a frozen PostgreSQL: inserts never answer. */
  frozen = false;
  /** Runs before each insert (to fence the consumer mid-batch, say). */
  beforeInsert: () => void = () => {};
  statements = 0;

  insert(users: readonly { id: string; name: string }[]): Promise<number> {
    this.statements++;
    this.beforeInsert();
    if (this.frozen) return new Promise(() => {});
    const failure = this.failForever ?? this.failures.shift();
    if (failure !== undefined) return Promise.reject(failure);
    if (users.some((u) => u.name.includes("bad"))) {
      return Promise.reject(pgError("23514", 'new row violates check constraint "users_name"'));
    }
    let inserted = 0;
    for (const { id, name } of users) {
      if (!this.rows.has(id)) {
        this.rows.set(id, name);
        inserted++;
      }
    }
    return Promise.resolve(inserted);
  }

  storedNames(ids: readonly string[]): Promise<Map<string, string>> {
    return Promise.resolve(
      new Map(ids.filter((id) => this.rows.has(id)).map((id) => [id, this.rows.get(id)!])),
    );
  }
}

export const user = (n: number, name = `user ${n}`) =>
  encodeEnvelope({
    id: `00000000-0000-7000-8000-${String(n).padStart(12, "0")}`,
    name,
    enqueued_at: 0,
  });
