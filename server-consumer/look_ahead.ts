/**
 * The consumer's look-ahead: while the batch in hand is inserted, the batches
 * after it are taken and their inserts started beside it (the store's client
 * has two connections), so the waits on Redis and on PostgreSQL overlap
 * instead of adding up. They come from the acknowledgement in flight, which
 * carries a fetch, or from an early fetch; each is still acknowledged after
 * its own commit, in the order taken (`in_flight.ts`).
 *
 * @module
 */

import type { FetchedBatch } from "@users-pipeline/queue";
import type { Step } from "./consumer_events.ts";
import type { Fetcher } from "./fetcher.ts";
import type { InFlight } from "./in_flight.ts";
import { Abandoned } from "./retrier.ts";
import type { StoreStep } from "./store_step.ts";

/**
 * Batches held beside the one in hand while in flow, for batches of
 * `batchSize` items. Two for batches of many: when an insert commits, the
 * rows of the batch after the next are already decoded and sent behind it on
 * the freed connection while the acknowledgement fetches another; with one,
 * each freed connection waits for that acknowledgement's round trip to Redis
 * and the decoding of what it took. One in single mode: a one-row insert
 * takes no longer than that round trip, so an item more in flight only adds
 * work per item.
 */
export function batchesAhead(batchSize: number): number {
  return batchSize > 1 ? 2 : 1;
}

/** Options of {@linkcode LookAhead}. */
export interface LookAheadOptions {
  readonly fetcher: Pick<Fetcher, "fetch">;
  readonly storeStep: Pick<StoreStep, "store">;
  readonly inFlight: InFlight;
  /** Most items per batch (1 in single mode). */
  readonly batchSize: number;
  readonly onStep?: (step: Step, batch: FetchedBatch) => void;
}

/** Takes the batches after the one in hand while it is stored. */
export class LookAhead {
  /**
   * True once a batch was acknowledged with no idle wait or fencing since: only then is a batch
   * fetched early. The first after a pause is fetched alone, so consumers waking together on a
   * small backlog share it instead of the first taking two batches while the others idle.
   */
  flowing = false;
  readonly #options: LookAheadOptions;

  constructor(options: LookAheadOptions) {
    this.#options = options;
  }

  /**
   * Takes the batches after `inHand` while it is stored: the one the
   * acknowledgement in flight fetched, and, while the queue is full, one
   * more once that has settled (so the calls on the processing list stay in
   * order), until {@linkcode batchesAhead} are held beside `inHand`. With no
   * acknowledgement in flight, one fetched early, in flow. Rejects with
   * `FencedError` when the consumer was fenced.
   */
  async takeDuring(inHand: FetchedBatch): Promise<void> {
    const { inFlight, batchSize } = this.#options;
    const acking = inFlight.acking;
    if (acking === undefined) {
      // A batch smaller than asked for emptied the queue, so an early fetch would most likely
      // come back empty: none then; none beside a recovered suspect either, which is held alone.
      const full = !inHand.fromRetry && inHand.items.length === batchSize;
      if (this.flowing && full) await this.#fetchEarly();
      return;
    }
    const after = await acking;
    if (after === undefined || after.items.length === 0) return;
    this.#storeAhead(after);
    if (after.items.length < batchSize || inFlight.aheadCount >= batchesAhead(batchSize)) return;
    inFlight.ackSettled();
    await this.#fetchEarly();
  }

  /** Fetches the batch after those held and starts storing it; takes nothing once stopping. */
  async #fetchEarly(): Promise<void> {
    let more: FetchedBatch;
    try {
      more = await this.#options.fetcher.fetch(this.#options.inFlight.items);
    } catch (error) {
      // What a fetch given up mid-call took stays in the processing list, handed back with the rest.
      if (error instanceof Abandoned) return;
      throw error;
    }
    if (more.items.length > 0) this.#storeAhead(more);
  }

  /**
   * Starts storing `next` (it is "fetched" for the fault tests from now on);
   * the loop awaits the store once `next` is in hand, so a failure surfaces there.
   */
  #storeAhead(next: FetchedBatch): void {
    const { onStep, storeStep, inFlight } = this.#options;
    onStep?.("fetched", next);
    const stored = storeStep.store(next);
    stored.catch(() => {});
    inFlight.putAhead(next, stored);
  }
}
