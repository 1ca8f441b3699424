/**
 * The acknowledger of the consumer: acknowledges each stored batch once its
 * rows are committed, counts it, and, when asked and the queue can, takes
 * the next batch in the same script call. The loop sends each
 * acknowledgement only once the previous one has settled, so they run in the
 * order the batches were taken, which is the order the acknowledgement trims
 * the processing list in.
 *
 * A batch counts in the stats once, when its acknowledgement is accepted: a
 * fenced consumer's batch is redelivered and counted by whoever acknowledges
 * it.
 *
 * @module
 */

import { FencedError, type FetchedBatch } from "@users-pipeline/queue";
import type { ConsumerEvent, ConsumerMeasurement, ConsumerStats } from "./consumer_events.ts";
import type { Membership } from "./membership.ts";
import type { Retrier } from "./retrier.ts";
import type { StoredBatch } from "./store_step.ts";

/**
 * What an acknowledgement came to: the next batch it fetched (empty when the
 * queue had none), `"acked"` when it fetched nothing, or `"fenced"` when the
 * consumer was fenced (nothing acknowledged; it has re-registered).
 */
export type Acked = FetchedBatch | "acked" | "fenced";

/** Options of {@linkcode Acknowledger}. */
export interface AcknowledgerOptions {
  readonly retrier: Retrier;
  readonly membership: Pick<Membership, "reregister">;
  /** Most items per batch, for the fetch an acknowledgement carries. */
  readonly batchSize: number;
  /** The queue fetches in the acknowledgement's script call (`ShardedQueue.fetchesWithAck`). */
  readonly fetchesWithAck: boolean;
  readonly stats: ConsumerStats;
  readonly onEvent: (event: ConsumerEvent) => void;
  readonly onMeasurement: (measurement: ConsumerMeasurement) => void;
}

/** Options of {@linkcode Acknowledger.acknowledge}. */
export interface AcknowledgeOptions {
  /**
   * Fetch the next batch with the acknowledgement, for a consumer that will
   * still hold this many items (the batch fetched during this one's insert,
   * or 0); no fetch when absent, when stopping, or when the queue fetches
   * separately.
   */
  readonly fetchHeld?: number;
}

/** Acknowledges stored batches and counts them. */
export class Acknowledger {
  readonly #o: AcknowledgerOptions;

  constructor(options: AcknowledgerOptions) {
    this.#o = options;
  }

  /**
   * Acknowledges a stored batch, retrying until the shutdown deadline, and
   * counts it.
   */
  async acknowledge(
    { batch, deadLetters, storedIds, insertSeconds, latenciesSeconds }: StoredBatch<FetchedBatch>,
    { fetchHeld }: AcknowledgeOptions = {},
  ): Promise<Acked> {
    const o = this.#o;
    const outcome = { storedIds, deadLetters };
    let next: Acked;
    try {
      next = await o.retrier.run(
        "redis",
        // Decided at each attempt: once stopping, the loop takes no new batch.
        () =>
          fetchHeld !== undefined && o.fetchesWithAck && !o.retrier.stopping
            ? batch.ackAndFetch(outcome, { max: o.batchSize, held: fetchHeld })
            : batch.ack(outcome).then(() => "acked" as const),
        { finishing: true },
      );
    } catch (error) {
      if (!(error instanceof FencedError)) throw error;
      // Our items were recovered while we worked; they will be redelivered and
      // the idempotent insert absorbs the repeat. They are counted (and their
      // dead letters buried) by whoever acknowledges them, so not here.
      await o.membership.reregister("it was presumed dead while storing a batch");
      return "fenced";
    }
    o.stats.batches++;
    o.stats.stored += storedIds.length;
    o.stats.deadLettered += deadLetters.length;
    o.onMeasurement({
      type: "batch_acked",
      items: batch.items.length,
      fromRetry: batch.fromRetry,
      stored: storedIds.length,
      deadLetters: deadLetters.map(({ kind }) => kind),
      insertSeconds,
      latenciesSeconds,
    });
    for (const { reason, sqlstate } of deadLetters) {
      o.onEvent(
        sqlstate === undefined
          ? { event: "dead_lettered", reason }
          : { event: "dead_lettered", reason, sqlstate },
      );
    }
    return next;
  }
}
