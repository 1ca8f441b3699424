/**
 * The fetcher of the consumer: takes batches from the queue into this
 * consumer's processing list, and waits for items when there are none. Each
 * fetch says how many items the consumer holds besides what it takes, so a
 * fetch repeated after a lost reply takes nothing more, and nothing is
 * fetched alongside a recovered suspect (see `queue/lua/fetch.lua`). Both
 * are retried through outages and given up at stop (`retrier.ts`).
 *
 * @module
 */

import type { FetchedBatch, ShardedQueue } from "@users-pipeline/queue";
import type { Membership } from "./membership.ts";
import type { Retrier } from "./retrier.ts";

/** Options of {@linkcode Fetcher}. */
export interface FetcherOptions {
  readonly queue: Pick<ShardedQueue, "fetch">;
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
  readonly #options: FetcherOptions;

  constructor(options: FetcherOptions) {
    this.#options = options;
  }

  /**
   * A batch for a consumer holding `held` items besides it, empty when the
   * queue has none; rejects with `FencedError` when the consumer is fenced.
   */
  fetch(held = 0): Promise<FetchedBatch> {
    const { queue, retrier, membership, batchSize } = this.#options;
    return retrier.retry(
      "redis",
      () => queue.fetch({ consumerId: membership.id, max: batchSize, held }),
    );
  }

  /**
   * Waits for items: the wait bounds itself client-side as well, in case a
   * reconnect leaves the blocking call hanging (see `blocking_wait.ts`).
   */
  async wait(): Promise<void> {
    const { retrier, waitForItems, blockTimeoutSeconds } = this.#options;
    await retrier.retry("redis", () => waitForItems(blockTimeoutSeconds));
  }
}
