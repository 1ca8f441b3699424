/**
 * What the consumer reports: the events worth a log record, the measurements
 * behind the metrics, and its running totals. The loop prints nothing;
 * `main.ts` decides how these are written.
 *
 * @module
 */

import type { DeadLetterKind } from "@users-pipeline/queue";
import type { Dependency, OutageEvent } from "./backoff.ts";

/** A point of the loop, reported to `onStep` (`consumer.ts`; the fault tests crash there). */
export type Step = "fetched" | "stored";

/**
 * What the loop reports. `event` is the name written to the log and the
 * other fields are written beside it, so they are spelled as in the log.
 */
export type ConsumerEvent =
  /** Registered: from now on the consumer takes work (its readiness). */
  | {
    readonly event: "consumer_started";
    readonly consumer_id: string;
    readonly batch_size: number;
  }
  /** Declared dead by others while alive; carries on under a new id. */
  | {
    readonly event: "consumer_fenced";
    readonly consumer_id: string;
    readonly new_consumer_id: string;
    readonly reason: string;
  }
  | OutageEvent
  /** Work taken back from consumers whose heartbeat expired. */
  | {
    readonly event: "recovered";
    readonly items: number;
    readonly buried: number;
    readonly consumers: number;
  }
  /** One item buried with its reason (and PostgreSQL's SQLSTATE if it refused the row). */
  | { readonly event: "dead_lettered"; readonly reason: string; readonly sqlstate?: string }
  /** Stopping took longer than allowed while retrying; `items` were still in hand. */
  | { readonly event: "shutdown_deadline"; readonly items: number }
  /** Unregistered, returning `items` unfinished items to the front of the queue. */
  | { readonly event: "handed_back"; readonly consumer_id: string; readonly items: number }
  /** Could not unregister; whatever it held is recovered once its heartbeat expires. */
  | { readonly event: "hand_back_failed"; readonly consumer_id: string; readonly error: unknown };

/**
 * What the loop measures, for the metrics (`metrics.ts`): more often, and in
 * more detail, than is worth a log record.
 */
export type ConsumerMeasurement =
  /** A batch acknowledged (a fenced consumer's batch is measured by whoever acknowledges it). */
  | {
    readonly type: "batch_acked";
    /** Items the batch held, poison included. */
    readonly items: number;
    /** True for an item recovered from a crashed consumer. */
    readonly fromRetry: boolean;
    /** Rows stored (including redeliveries of rows already there). */
    readonly stored: number;
    /** The kind of each item buried. */
    readonly deadLetters: readonly DeadLetterKind[];
    /** How long the successful insert took; undefined when nothing was to insert. */
    readonly insertSeconds: number | undefined;
    /** For each row stored, the seconds from the API's enqueue to the commit. */
    readonly latenciesSeconds: readonly number[];
  }
  /** A call to Redis or PostgreSQL that failed and will be retried (each one, not an outage's first). */
  | { readonly type: "call_failed"; readonly dependency: Dependency; readonly error: unknown };

/** Running totals, for logs, tests and benchmarks. */
export interface ConsumerStats {
  /** Rows acknowledged as stored (including redeliveries of rows already there). */
  stored: number;
  deadLettered: number;
  batches: number;
  recovered: number;
}
