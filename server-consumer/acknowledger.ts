/**
 * The acknowledger of the consumer: acknowledges each stored batch once its
 * rows are committed, counts it, and, when the queue can, takes the next
 * batch in the same script call. The loop sends each
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

import type { FetchedBatch } from "@users-pipeline/queue";
import type { ConsumerEvent, ConsumerMeasurement, ConsumerStats } from "./consumer_events.ts";
import type { Retrier } from "./retrier.ts";
import type { StoredBatch } from "./store_step.ts";

/** Options of {@linkcode Acknowledger}. */
export interface AcknowledgerOptions {
  readonly retrier: Retrier;
  /** Most items per batch, for the fetch an acknowledgement carries. */
  readonly batchSize: number;
  /** The queue fetches in the acknowledgement's script call (`ShardedQueue.fetchesWithAck`). */
  readonly fetchesWithAck: boolean;
  readonly stats: ConsumerStats;
  readonly onEvent: (event: ConsumerEvent) => void;
  readonly onMeasurement: (measurement: ConsumerMeasurement) => void;
}

/** Acknowledges stored batches and counts them. */
export class Acknowledger {
  readonly #options: AcknowledgerOptions;

  constructor(options: AcknowledgerOptions) {
    this.#options = options;
  }

  /**
   * Acknowledges a stored batch, retrying until the shutdown deadline, and
   * counts it. When the queue fetches in the acknowledgement's script call
   * and the consumer is not stopping, it takes the next batch with it, for a
   * consumer that will still hold `fetchHeld` items: that batch (empty when
   * the queue had none), else undefined. Rejects with `FencedError` when the
   * consumer was fenced: nothing was acknowledged.
   */
  async acknowledge(
    { batch, deadLetters, storedIds, insertSeconds, latenciesSeconds }: StoredBatch<FetchedBatch>,
    { fetchHeld }: { fetchHeld: number },
  ): Promise<FetchedBatch | undefined> {
    const { retrier, batchSize, fetchesWithAck, stats, onEvent, onMeasurement } = this.#options;
    const outcome = { storedIds, deadLetters };
    const next = await retrier.retry(
      "redis",
      // Decided at each attempt: once stopping, the loop takes no new batch.
      () =>
        fetchesWithAck && !retrier.stopping
          ? batch.ackAndFetch(outcome, { max: batchSize, held: fetchHeld })
          : batch.ack(outcome).then(() => undefined),
      { finishing: true },
    );
    stats.batches++;
    stats.stored += storedIds.length;
    stats.deadLettered += deadLetters.length;
    onMeasurement({
      type: "batch_acked",
      items: batch.items.length,
      fromRetry: batch.fromRetry,
      stored: storedIds.length,
      deadLetters: deadLetters.map(({ kind }) => kind),
      insertSeconds,
      latenciesSeconds,
    });
    for (const { reason, sqlstate } of deadLetters) {
      onEvent(
        sqlstate === undefined
          ? { event: "dead_lettered", reason }
          : { event: "dead_lettered", reason, sqlstate },
      );
    }
    return next;
  }
}
