/**
 * How the consumer's events are written: each {@link ConsumerEvent} becomes
 * one record of the pipeline's JSON-lines log (`runtime/event_log.ts`) with its
 * level and a sentence for a human. The loop itself prints nothing.
 *
 * @module
 */

import { errorText, type EventLog, type LogLevel } from "@users-pipeline/runtime/event_log";
import type { ConsumerEvent } from "./consumer_events.ts";

/** Writes `event` to `log`. */
export function logConsumerEvent(log: EventLog, event: ConsumerEvent): void {
  const { event: name, ...fields } = event;
  log[levelOf(event)](name, { ...fields, msg: sentenceOf(event) });
}

function levelOf({ event }: ConsumerEvent): LogLevel {
  switch (event) {
    case "consumer_fenced":
    case "outage_started":
    case "dead_lettered":
    case "shutdown_deadline":
    case "hand_back_failed":
      return "warn";
    default:
      return "info";
  }
}

function sentenceOf(e: ConsumerEvent): string {
  switch (e.event) {
    case "consumer_started":
      return `consumer ${e.consumer_id} started (batch size ${e.batch_size})`;
    case "consumer_fenced":
      return `consumer ${e.consumer_id} was fenced (${e.reason}); continuing as ${e.new_consumer_id}`;
    case "outage_started":
      return `${e.dependency} unavailable, retrying with backoff: ${errorText(e.error)}`;
    case "outage_ended":
      return `${e.dependency} is back after ${e.ms} ms and ${e.failures} failed attempts`;
    case "recovered":
      return `recovered ${e.items} items (${e.buried} dead-lettered) from ${e.consumers} dead consumers`;
    case "dead_lettered":
      return `dead-lettered: ${e.reason}${e.sqlstate === undefined ? "" : ` (${e.sqlstate})`}`;
    case "shutdown_deadline":
      return `shutdown deadline passed with ${e.items} items in hand: handing them back`;
    case "handed_back":
      return `consumer ${e.consumer_id} stopped; ${e.items} items handed back`;
    case "hand_back_failed":
      return `consumer ${e.consumer_id} could not hand back its items, which await recovery: ${
        errorText(e.error)
      }`;
  }
}
