/**
 * A batch as a unit of work: the items one consumer took from one shard, held
 * in its processing list until the batch is acknowledged
 * (`docs/delivery.md#how-the-code-keeps-it`). The handle remembers who took it
 * and where, so whoever holds it finishes it without naming the consumer or
 * the shard again, and its acknowledgement may take the next batch in the
 * same script call.
 *
 * Being fenced is an error ({@linkcode FencedError}), never a value: a
 * fetch, an acknowledgement or a heartbeat that finds its consumer fenced
 * rejects with it, and did nothing. Nothing to take is an empty batch.
 *
 * @module
 */

import type { DeadLetter } from "./dead_letters.ts";
import type { QueueKeys } from "./keys.ts";
import type { CallOf } from "./lua_script.ts";
import type { ACK, FETCH, FetchReply } from "./scripts.ts";

/**
 * The consumer was declared dead (its heartbeat expired and its items were
 * recovered by others): the scripts refuse it new work and ignore its
 * acknowledgements, so it must re-register under a new id.
 */
export class FencedError extends Error {
  override readonly name = "FencedError";
  /** The id that was fenced. */
  readonly consumerId: string;

  constructor(consumerId: string) {
    super(
      `Cannot work as consumer ${consumerId}: it was fenced, its heartbeat ` +
        `expired and its work was recovered by others`,
    );
    this.consumerId = consumerId;
  }
}

/** Items a consumer took, oldest first. */
export interface Batch {
  readonly items: readonly string[];
  /** True for an item recovered from a crashed consumer (always a batch of one). */
  readonly fromRetry: boolean;
  /** The shard it was taken from (`sharded_queue.ts`); absent means shard 0. */
  readonly shard?: number;
}

/** What became of a batch's items, which its acknowledgement records. */
export interface AckOutcome {
  /** The ids of the rows committed (they leave the status index). @default [] */
  readonly storedIds?: readonly string[];
  /** The items buried, each with its reason. @default [] */
  readonly deadLetters?: readonly DeadLetter[];
}

/** What to take with an acknowledgement, as a fetch would. */
export interface NextFetch {
  /** Most items to take. */
  readonly max: number;
  /**
   * Items the consumer still holds once the batch is acknowledged (the batch
   * fetched while it was stored). @default 0
   */
  readonly held?: number;
}

/** What a fetch takes, and for whom. */
export interface FetchOptions extends NextFetch {
  readonly consumerId: string;
}

/** What a fetch of one shard takes (`sharded_queue.ts`). */
export interface ShardFetchOptions extends FetchOptions {
  /**
   * The consumer holds a batch in another shard's list (`sharded_queue.ts`),
   * so, holding something, it is not given a recovered item either.
   * @default false
   */
  readonly holdingElsewhere?: boolean;
}

/** How the queue that handed a batch out finishes it. */
export interface BatchSettler {
  ack(outcome: AckOutcome): Promise<void>;
  ackAndFetch(outcome: AckOutcome, next: NextFetch): Promise<FetchedBatch>;
}

/** A batch's data, and the consumer that took it. */
export interface FetchedFields extends Batch {
  readonly consumerId: string;
  /**
   * Set on an empty batch when recovered items wait, which only a fetch
   * holding nothing may take (see `lua/fetch.lua`). @default false
   */
  readonly suspectWaiting?: boolean;
}

/** A batch as the queue hands it out: its items, and the moves that finish it. */
export class FetchedBatch implements Batch {
  readonly items: readonly string[];
  readonly fromRetry: boolean;
  readonly shard?: number;
  readonly suspectWaiting: boolean;
  /** The consumer that took it, whose processing list holds it. */
  readonly consumerId: string;
  readonly #settler: BatchSettler;

  constructor(fields: FetchedFields, settler: BatchSettler) {
    this.items = fields.items;
    this.fromRetry = fields.fromRetry;
    if (fields.shard !== undefined) this.shard = fields.shard;
    this.suspectWaiting = fields.suspectWaiting ?? false;
    this.consumerId = fields.consumerId;
    this.#settler = settler;
  }

  /**
   * Acknowledges the batch, records its dead letters and updates the status
   * index, in one step. Call it only once the stored rows are committed.
   * Rejects with {@linkcode FencedError} when the consumer was fenced (nothing
   * was acknowledged). A repeat of an acknowledgement that ran acknowledges
   * nothing more.
   */
  ack(outcome: AckOutcome = {}): Promise<void> {
    return this.#settler.ack(outcome);
  }

  /**
   * {@linkcode ack}, and the next batch as a fetch takes it for a consumer
   * holding `next.held` items once this one is acknowledged: in the same
   * script call when the queue's `fetchesWithAck` says so, else in a fetch of
   * its own right after. A repeat after a lost reply returns the same batch.
   */
  ackAndFetch(outcome: AckOutcome, next: NextFetch): Promise<FetchedBatch> {
    return this.#settler.ackAndFetch(outcome, next);
  }
}

/** A fetch's reply (see `lua/fetch.lua`) as a batch's fields; rejects when fenced. */
export function fieldsOfReply(reply: FetchReply, consumerId: string): FetchedFields {
  if (reply === -1) throw new FencedError(consumerId);
  const [source, taken] = reply as [0 | 1 | 2, string[] | string | undefined];
  if (source === 1) return { items: [taken as string], fromRetry: true, consumerId };
  if (source === 2) return { items: [], fromRetry: false, suspectWaiting: true, consumerId };
  // The script returns the list's order (newest at the left); FIFO wants the oldest first.
  const items = (taken as string[] | undefined) ?? [];
  items.reverse();
  return { items, fromRetry: false, consumerId };
}

/** The fetch script's keys and arguments for a fetch in the shard of `keys`. */
export function fetchCall(
  keys: QueueKeys,
  { consumerId, max, held = 0, holdingElsewhere = false }: ShardFetchOptions,
): CallOf<typeof FETCH> {
  return {
    keys: {
      consumers: keys.consumers,
      retry: keys.retry,
      queue: keys.queue,
      processing: keys.processingPrefix + consumerId,
    },
    args: { consumerId, max, held, holdingElsewhere: holdingElsewhere ? "1" : "0" },
  };
}

/**
 * The acknowledgement script's keys and arguments for `batch` in the shard of
 * `keys`, taking `next` with it when given.
 */
export function ackCall(
  keys: QueueKeys,
  { batch, outcome, next }: { batch: FetchedBatch; outcome: AckOutcome; next?: NextFetch },
): CallOf<typeof ACK> {
  const { storedIds = [], deadLetters = [] } = outcome;
  return {
    keys: {
      consumers: keys.consumers,
      processing: keys.processingPrefix + batch.consumerId,
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
      consumerId: batch.consumerId,
      count: batch.items.length,
      fromRetry: batch.fromRetry ? "1" : "0",
      // Oldest first: what the acknowledgement checks is still at the list's right end.
      oldestItem: batch.items[0] ?? "",
      next: next?.max ?? 0,
      heldAfter: next?.held ?? 0,
      storedCount: storedIds.length,
    },
    restArgs: [
      ...storedIds,
      ...deadLetters.flatMap((letter) => [letter.id ?? "", letter.kind, JSON.stringify(letter)]),
    ],
  };
}
