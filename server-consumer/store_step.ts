/**
 * The store step of the consumer: decode a batch, insert its users, and
 * decide which items are dead letters. Poison (an item that is not a valid
 * envelope, or a row PostgreSQL refuses for its data) becomes a dead letter
 * with its reason and never blocks the loop; transient failures are retried
 * until the shutdown deadline (`retrier.ts`). Nothing here acknowledges: the
 * result is what the acknowledgement needs (`acknowledger.ts`), which is sent
 * only once the rows are committed.
 *
 * @module
 */

import {
  type Batch,
  type DeadLetter,
  decodeEnvelope,
  PoisonMessageError,
  type UserEnvelope,
} from "@users-pipeline/queue";
import type { Clock } from "@users-pipeline/runtime/clock";
import type { Retrier } from "./retrier.ts";
import { type UserStore, writeUsers } from "./user_writer.ts";

/** A batch stored and not yet acknowledged: what its acknowledgement needs and reports. */
export interface StoredBatch<B extends Batch = Batch> {
  readonly batch: B;
  readonly deadLetters: readonly DeadLetter[];
  /** The ids of the rows committed (they leave the status index). */
  readonly storedIds: readonly string[];
  /** How long the successful insert took; undefined when nothing was to insert. */
  readonly insertSeconds: number | undefined;
  /** For each row stored, the seconds from the API's enqueue to the commit. */
  readonly latenciesSeconds: readonly number[];
}

/** Options of {@linkcode StoreStep}. */
export interface StoreStepOptions {
  readonly store: UserStore;
  readonly retrier: Retrier;
  readonly clock: Clock;
}

/** Stores batches: their rows committed, their poison set apart. */
export class StoreStep {
  readonly #options: StoreStepOptions;

  constructor(options: StoreStepOptions) {
    this.#options = options;
  }

  /**
   * Decodes and stores `batch`: what is left to acknowledge. Invalid items
   * and rows PostgreSQL refuses become dead letters; transient failures are
   * retried until the shutdown deadline.
   */
  async store<B extends Batch>(batch: B): Promise<StoredBatch<B>> {
    const { clock, retrier, store } = this.#options;
    const deadLetters: DeadLetter[] = [];
    const users: UserEnvelope[] = [];
    const payloads: string[] = [];
    const storedIds: string[] = [];
    const now = new Date(clock.now()).toISOString();
    for (const payload of batch.items) {
      try {
        users.push(decodeEnvelope(payload));
        payloads.push(payload);
      } catch (error) {
        if (!(error instanceof PoisonMessageError)) throw error;
        deadLetters.push({ payload, reason: error.message, kind: "invalid_item", dead_at: now });
      }
    }
    let insertStarted = 0;
    let committedAt = 0;
    let insertSeconds: number | undefined;
    let latenciesSeconds: number[] = [];
    if (users.length > 0) {
      const rejected = await retrier.retry(
        "postgres",
        () => {
          insertStarted = clock.now();
          return writeUsers(store, users);
        },
        { finishing: true },
      );
      committedAt = clock.now();
      insertSeconds = (committedAt - insertStarted) / 1_000;
      const refused = new Set<number>();
      for (const { index, reason, sqlstate } of rejected) {
        refused.add(index);
        deadLetters.push({
          payload: payloads[index]!,
          reason,
          // Only the database's data errors carry a SQLSTATE; the writer's other rejects are ids
          // already stored under another name.
          kind: sqlstate === undefined ? "id_conflict" : "database_refused",
          id: users[index]!.id,
          sqlstate,
          dead_at: now,
        });
      }
      const committed = users.filter((_, i) => !refused.has(i));
      storedIds.push(...committed.map((user) => user.id));
      latenciesSeconds = committed.map(({ enqueued_at }) => (committedAt - enqueued_at) / 1_000);
    }
    return { batch, deadLetters, storedIds, insertSeconds, latenciesSeconds };
  }
}
