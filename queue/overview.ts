/**
 * The queue at a glance, for `GET /admin/overview` and the tools built on it:
 * how many users wait where, how old the oldest is, which consumers are alive
 * and what they stored, and the dead letters by kind. One read-only script
 * (`OVERVIEW` in `scripts.ts`), so it is one round trip, a consistent
 * snapshot, and cheap whatever the backlog: it reads lengths, counters and
 * one item, never the backlog itself.
 *
 * @module
 */

import type { Redis } from "ioredis";
import { enqueuedAtOf } from "./envelope.ts";
import type { QueueKeys } from "./keys.ts";
import { defineQueueScripts, type OverviewReply } from "./scripts.ts";

/** One registered consumer. */
export interface ConsumerOverview {
  readonly id: string;
  /** False once its heartbeat expired (it is recovered on the next recovery tick). */
  readonly alive: boolean;
  /** Milliseconds its heartbeat has left; 0 once expired. */
  readonly heartbeat_ttl_ms: number;
  /** Items in its processing list (the batch in hand). */
  readonly processing: number;
  /** Rows it acknowledged as stored since it registered. */
  readonly stored: number;
}

/** What {@linkcode readOverview} returns, JSON-ready. */
export interface Overview {
  /** Items by state: in the main list, the retry list, processing lists, the dead letters. */
  readonly depth: {
    readonly queued: number;
    readonly retry: number;
    readonly processing: number;
    readonly dead: number;
  };
  /**
   * Age of the next item out of the main list (its `enqueued_at`), in ms;
   * null when the list is empty or that item carries no valid `enqueued_at`.
   */
  readonly oldest_queued_age_ms: number | null;
  readonly consumers: readonly ConsumerOverview[];
  /** Dead letters by kind (see `DeadLetterKind`). */
  readonly dead_letters_by_reason: Readonly<Record<string, number>>;
  /** Rows acknowledged as stored by every consumer, since the queue's stats began. */
  readonly stored_total: number;
}

/** Reads the overview of the queue at `keys`; `now` is for the age (ms since the epoch). */
export async function readOverview(
  redis: Redis,
  keys: QueueKeys,
  now: number = Date.now(),
): Promise<Overview> {
  return overviewFromReply(await overviewReply(redis, keys), now);
}

/** The overview script's raw reply, for readers that shape it their own way (`queue_stats.ts`). */
export function overviewReply(redis: Redis, keys: QueueKeys): Promise<OverviewReply> {
  defineQueueScripts(redis);
  return redis.queueOverview(
    keys.queue,
    keys.retry,
    keys.dead,
    keys.consumers,
    keys.deadCounts,
    keys.stats,
    keys.processingPrefix,
    keys.heartbeatPrefix,
  );
}

/** Shapes the script's raw reply. */
export function overviewFromReply(reply: OverviewReply, now: number): Overview {
  const [queued, retry, dead, oldest, consumers, counts, stats] = reply;
  const consumerList = consumers.map(([id, processing, ttl, stored]) => ({
    id,
    alive: ttl > 0 || ttl === -1,
    heartbeat_ttl_ms: Math.max(0, ttl),
    processing,
    stored: Number(stored),
  })).sort((a, b) => a.id.localeCompare(b.id));
  return {
    depth: {
      queued,
      retry,
      processing: consumerList.reduce((sum, c) => sum + c.processing, 0),
      dead,
    },
    oldest_queued_age_ms: ageOf(oldest, now),
    consumers: consumerList,
    dead_letters_by_reason: pairs(counts),
    stored_total: pairs(stats).stored ?? 0,
  };
}

/** Field, value, field, value… as an object of numbers. */
function pairs(flat: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = Number(flat[i + 1]);
  return out;
}

function ageOf(item: string | null, now: number): number | null {
  const enqueuedAt = item === null ? undefined : enqueuedAtOf(item);
  return enqueuedAt === undefined ? null : Math.max(0, now - enqueuedAt);
}
