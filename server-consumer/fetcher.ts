/**
 * The fetcher of the consumer: takes units of work (`FetchedBatch`es) from
 * the queue into this consumer's processing list, and waits for items when
 * there are none. Each fetch says how many items the consumer holds besides
 * what it takes, so a fetch repeated after a lost reply takes nothing more,
 * and nothing is fetched alongside a recovered suspect (see
 * `queue/lua/fetch.lua`).
 *
 * @module
 */

import { FencedError, type FetchedBatch } from "@users-pipeline/queue";
import type { ConsumerQueue } from "./consumer.ts";
import type { Membership } from "./membership.ts";
import { Abandoned, type Retrier } from "./retrier.ts";

/** Options of {@linkcode Fetcher}. */
export interface FetcherOptions {
  readonly queue: Pick<ConsumerQueue, "fetch">;
  readonly retrier: Retrier;
  readonly membership: Pick<Membership, "id">;
  /** Most items per batch (1 in single mode). */
  readonly batchSize: number;
  /** Blocks until the queue may have items or the timeout passes (a dedicated connection). */
  readonly waitForItems: (timeoutSeconds: number) => Promise<unknown>;
  readonly blockTimeoutSeconds: number;
}

/** Takes batches for the consumer. */
export class Fetcher {
  readonly #o: FetcherOptions;

  constructor(options: FetcherOptions) {
    this.#o = options;
  }

  /**
   * A batch for a consumer holding nothing, retried through outages (given
   * up at stop); `"fenced"` when the consumer is fenced.
   */
  fetch(): Promise<FetchedBatch | "fenced"> {
    return this.#fetch(0);
  }

  /**
   * The batch after `inHand`, fetched while `inHand` is stored, for a
   * consumer holding `held` items (`inHand`'s by default). Never rejects:
   * `"none"` when the consumer is stopping (what a fetch given up mid-call
   * took stays in the processing list and is handed back with the rest).
   */
  async fetchEarly(
    inHand: FetchedBatch,
    { held = inHand.items.length }: { held?: number } = {},
  ): Promise<FetchedBatch | "fenced" | "none"> {
    if (this.#o.retrier.stopping) return "none";
    try {
      return await this.#fetch(held);
    } catch (error) {
      if (error instanceof Abandoned) return "none";
      throw error;
    }
  }

  /**
   * Waits for items, retried like any other call: the wait bounds itself
   * client-side as well, in case a reconnect leaves the blocking call hanging
   * (see `blocking_wait.ts`).
   */
  async wait(): Promise<void> {
    const { retrier, waitForItems, blockTimeoutSeconds } = this.#o;
    await retrier.run("redis", () => waitForItems(blockTimeoutSeconds));
  }

  async #fetch(held: number): Promise<FetchedBatch | "fenced"> {
    const { queue, retrier, membership, batchSize } = this.#o;
    try {
      return await retrier.run(
        "redis",
        () => queue.fetch({ consumerId: membership.id, max: batchSize, held }),
      );
    } catch (error) {
      if (error instanceof FencedError) return "fenced";
      throw error;
    }
  }
}
