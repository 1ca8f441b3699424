/**
 * The dead letters as an operator handles them: list them newest first with
 * their counts by kind, requeue them (all, one kind, or given letters) once
 * whatever buried them is fixed, or purge them. Used by the API's admin
 * routes (`server/admin_routes.ts`, which the dashboard calls) and by
 * `./stack dlq` (`tools/stack/dlq.ts`).
 *
 * Requeuing and purging run as a loop of chunks, each one atomic script step
 * (`lua/dead_letters_take.lua`): an interruption between two chunks
 * leaves every letter either still dead or requeued (or purged), never both
 * and never neither, so running the same command again finishes the job.
 *
 * A sharded queue has a dead-letter list per shard (a letter stays in its
 * user's shard, and a requeued one goes back to that shard's list): counts
 * add up, a page is merged newest first by `dead_at`, and a requeue or purge
 * runs shard after shard (with given ids, only in those ids' shards; a letter
 * named by its record may be in any shard).
 *
 * A letter is named by its user's id, never by its place in the list, which
 * shifts as consumers bury new letters and operators take others; a letter
 * without an id (an item that was never an envelope) is named by its whole
 * record, which a listing returns as `record` for that purpose. Two records
 * with the same text cannot be told apart, so naming one takes both.
 *
 * @module
 */

import { type QueueKeys, type ShardKeys, shardList, shardOf } from "./keys.ts";
import { runScript } from "./lua_script.ts";
import { DEAD_LETTERS_TAKE, type RedisClient } from "./scripts.ts";

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
  /**
   * The record as stored, on a listed letter without an id: what names it to a
   * requeue or purge ({@linkcode DeadLetterFilter.records}).
   */
  readonly record?: string;
}

/** Which dead letters a requeue or purge takes; every one when both are absent. */
export interface DeadLetterFilter {
  /** Only letters of this kind (`DEAD_LETTER_KINDS`, `unknown` for records without one). */
  readonly reason?: string;
  /** Only letters of these user ids. */
  readonly ids?: readonly string[];
  /** Only these letters without a user id, each named by its whole record. */
  readonly records?: readonly string[];
}

/** One page of dead letters, newest first, and the counts of all of them. */
export interface DeadLetterPage {
  /** How many dead letters there are. */
  readonly total: number;
  /** How many of each kind (kinds with none are absent). */
  readonly byReason: Readonly<Record<string, number>>;
  readonly offset: number;
  /**
   * The letters at `offset`…, decoded (with their `record` when they have no id);
   * a record that is not JSON comes back as its text.
   */
  readonly letters: readonly (DeadLetter | { readonly raw: string })[];
}

/** Options of {@linkcode DeadLetters.requeue} and {@linkcode DeadLetters.purge}. */
export interface TakeOptions {
  /**
   * Records examined per script step: a step holds Redis for about a
   * millisecond per 1,000, so 1,000 keeps every other client's wait short.
   * @default 1000
   */
  readonly chunk?: number;
  /** Called after each step with the letters taken so far and the step count. */
  readonly onProgress?: (taken: number, steps: number) => void;
  /** Stops between two steps (what was taken stays taken). */
  readonly signal?: AbortSignal;
}

/** The largest page {@linkcode DeadLetters.list} returns. */
export const MAX_PAGE = 1_000;

/** The dead letters of one queue (one shard's keys, or every shard's). */
export class DeadLetters {
  readonly #redis: RedisClient;
  readonly #shards: readonly QueueKeys[];

  constructor(redis: RedisClient, keys: ShardKeys) {
    this.#redis = redis;
    this.#shards = shardList(keys);
  }

  /**
   * `limit` letters from `offset`, newest first, with the total and the counts
   * by kind: O(offset + limit) per shard, whatever the number of letters.
   */
  async list(offset = 0, limit = 20): Promise<DeadLetterPage> {
    if (!Number.isInteger(offset) || offset < 0) {
      throw new RangeError(`Cannot list dead letters from offset ${offset}: it must be ≥ 0`);
    }
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
      throw new RangeError(
        `Cannot list ${limit} dead letters: the limit must be between 1 and ${MAX_PAGE}`,
      );
    }
    // One shard: the page itself. Several: each shard's first offset + limit, merged.
    const single = this.#shards.length === 1;
    const pages = await Promise.all(this.#shards.map(async (keys) =>
      (await this.#redis.multi()
        .llen(keys.dead)
        .hgetall(keys.deadCounts)
        .lrange(keys.dead, single ? offset : 0, offset + limit - 1)
        .exec()) as [[null, number], [null, Record<string, string>], [null, string[]]]
    ));
    const byReason: Record<string, number> = {};
    let total = 0;
    for (const [[, length], [, counts]] of pages) {
      total += length;
      for (const [kind, n] of Object.entries(counts)) {
        byReason[kind] = (byReason[kind] ?? 0) + Number(n);
      }
    }
    const letters = pages.flatMap(([, , [, records]]) => records.map(decodeRecord));
    if (!single) {
      // Each shard's list is newest first; ISO 8601 times sort as text.
      const deadAt = (letter: DeadLetter | { raw: string }) =>
        "dead_at" in letter && typeof letter.dead_at === "string" ? letter.dead_at : "";
      letters.sort((a, b) => deadAt(b).localeCompare(deadAt(a)));
    }
    return {
      total,
      byReason,
      offset,
      letters: single ? letters : letters.slice(offset, offset + limit),
    };
  }

  /**
   * Moves the matching letters back to the main list (crash counts cleared,
   * index back to queued); resolves with how many were requeued. Everything
   * takes O(letters); one kind, or given ids, examines every letter (the list
   * is indexed by neither), O(N²/chunk) list steps over N letters in all —
   * about a second for 100,000 (an admin operation, in 1,000-record steps
   * that never hold Redis long).
   */
  requeue(filter: DeadLetterFilter = {}, options: TakeOptions = {}): Promise<number> {
    return this.#take("requeue", { ...options, filter });
  }

  /** Deletes the matching letters (and their index entries); resolves with how many. */
  purge(filter: DeadLetterFilter = {}, options: TakeOptions = {}): Promise<number> {
    return this.#take("purge", { ...options, filter });
  }

  async #take(
    action: "requeue" | "purge",
    { filter, chunk = 1_000, onProgress, signal }: TakeOptions & { filter: DeadLetterFilter },
  ): Promise<number> {
    const ids = filter.ids ?? [];
    const records = filter.records ?? [];
    const named = filter.ids !== undefined || filter.records !== undefined;
    if (named && ids.length === 0 && records.length === 0) return 0;
    // A user's letter is in its user's shard; a letter named by its record, in any.
    const wanted = !named || records.length > 0
      ? undefined
      : new Set(ids.map((id) => shardOf(id, this.#shards.length)));
    let taken = 0;
    let steps = 0;
    for (const [shard, keys] of this.#shards.entries()) {
      if (wanted !== undefined && !wanted.has(shard)) continue;
      const shardNames = [
        ...ids.filter((id) => shardOf(id, this.#shards.length) === shard),
        ...records,
      ];
      let cursor = 0;
      for (;;) {
        signal?.throwIfAborted();
        const [n, next, done] = await runScript(this.#redis, {
          script: DEAD_LETTERS_TAKE,
          keys: {
            dead: keys.dead,
            queue: keys.queue,
            queuedIds: keys.queuedIds,
            deadIds: keys.deadIds,
            deadCounts: keys.deadCounts,
            deliveries: keys.deliveries,
          },
          args: { action, cursor, window: chunk, kind: filter.reason ?? "" },
          restArgs: shardNames,
        });
        taken += n;
        cursor = next;
        steps++;
        onProgress?.(taken, steps);
        if (done === 1) break;
      }
    }
    return taken;
  }
}

function decodeRecord(record: string): DeadLetter | { raw: string } {
  try {
    const letter = JSON.parse(record);
    if (typeof letter === "object" && letter !== null) {
      return typeof letter.id === "string" ? letter as DeadLetter : { ...letter, record };
    }
  } catch {
    // Not JSON: someone pushed it by hand; show it as it is.
  }
  return { raw: record };
}
