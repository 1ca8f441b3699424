/**
 * The one read of the queue's state, and its two shapes: the overview for
 * `GET /admin/overview`, the dashboard and the CLI, and the stats for the
 * consumer's gauges. Per shard, the members of the consumers set and then
 * one read-only script (`lua/overview.lua`): two round trips, a consistent
 * snapshot of the shard, and cheap whatever the backlog: lengths, counters
 * and the oldest item of each waiting list (the API pushes at the left and
 * consumers take from the right, so that is `LINDEX <list> -1`). Over
 * several shards (read side by side) the numbers add up, the oldest age is
 * the oldest of any shard, and each consumer (one id, registered in every
 * shard) appears once.
 *
 * @module
 */

import { enqueuedAtOf } from "./envelope.ts";
import { type ShardKeys, shardList } from "./keys.ts";
import { runScript } from "./lua_script.ts";
import { OVERVIEW, type OverviewReply, type RedisClient } from "./scripts.ts";

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

/** What {@linkcode readQueueStats} returns: the numbers of the consumer's gauges. */
export interface QueueStats {
  readonly depth: Overview["depth"];
  /**
   * Seconds since the API enqueued the oldest item of each list: 0 for an
   * empty list, `undefined` when that item is not an envelope (poison, whose
   * age is unknown; it is dead-lettered when taken).
   */
  readonly oldestAgeSeconds: Readonly<Record<"queued" | "retry", number | undefined>>;
}

/** Which queue {@linkcode readOverview} and {@linkcode readQueueStats} read, and when. */
export interface ReadQueueOptions {
  /** The queue's keys: one shard's, or every shard's. */
  readonly keys: ShardKeys;
  /** Now, in ms since the epoch, for the ages. @default Date.now() */
  readonly now?: number;
}

/** Reads the overview of the queue at `keys`. */
export async function readOverview(
  redis: RedisClient,
  { keys, now = Date.now() }: ReadQueueOptions,
): Promise<Overview> {
  const replies = await readShards(redis, keys);
  return mergeOverviews(replies.map((reply) => overviewFromReply(reply, now)));
}

/** Reads the queue's depth and the age of the oldest item of each waiting list. */
export async function readQueueStats(
  redis: RedisClient,
  { keys, now = Date.now() }: ReadQueueOptions,
): Promise<QueueStats> {
  const replies = await readShards(redis, keys);
  // The oldest known age; unknown only when no shard has a known item waiting.
  const oldest = (items: (string | null)[]) => {
    const ages = items.map((item) => item === null ? 0 : ageOf(item, now));
    const known = Math.max(0, ...ages.filter((age) => age !== undefined)) / 1_000;
    return known === 0 && ages.includes(undefined) ? undefined : known;
  };
  return {
    depth: mergeOverviews(replies.map((reply) => overviewFromReply(reply, now))).depth,
    oldestAgeSeconds: {
      queued: oldest(replies.map((reply) => reply[3])),
      retry: oldest(replies.map((reply) => reply[7])),
    },
  };
}

/**
 * Every shard's overview script reply: the consumers set's members first,
 * then the script, given their keys.
 */
function readShards(redis: RedisClient, keys: ShardKeys): Promise<OverviewReply[]> {
  return Promise.all(
    shardList(keys).map(async (shard) => {
      const ids = await redis.smembers(shard.consumers);
      return runScript(redis, {
        script: OVERVIEW,
        keys: {
          queue: shard.queue,
          retry: shard.retry,
          dead: shard.dead,
          consumers: shard.consumers,
          deadCounts: shard.deadCounts,
          stats: shard.stats,
        },
        restKeys: ids.flatMap((id) => [shard.processingPrefix + id, shard.heartbeatPrefix + id]),
        restArgs: ids,
      });
    }),
  );
}

/** The overviews of several shards as one: sums, the oldest age, each consumer once. */
export function mergeOverviews(overviews: readonly Overview[]): Overview {
  if (overviews.length === 1) return overviews[0]!;
  const consumers = new Map<string, ConsumerOverview>();
  for (const { consumers: list } of overviews) {
    for (const consumer of list) {
      const seen = consumers.get(consumer.id);
      // Registered and heartbeating in every shard: alive while alive in all of them.
      consumers.set(
        consumer.id,
        seen === undefined ? consumer : {
          id: consumer.id,
          alive: seen.alive && consumer.alive,
          heartbeat_ttl_ms: Math.min(seen.heartbeat_ttl_ms, consumer.heartbeat_ttl_ms),
          processing: seen.processing + consumer.processing,
          stored: seen.stored + consumer.stored,
        },
      );
    }
  }
  const sum = (of: (overview: Overview) => number) =>
    overviews.reduce((total, overview) => total + of(overview), 0);
  const ages = overviews.map((overview) => overview.oldest_queued_age_ms)
    .filter((age) => age !== null);
  const byReason: Record<string, number> = {};
  for (const overview of overviews) {
    for (const [kind, n] of Object.entries(overview.dead_letters_by_reason)) {
      byReason[kind] = (byReason[kind] ?? 0) + n;
    }
  }
  return {
    depth: {
      queued: sum((o) => o.depth.queued),
      retry: sum((o) => o.depth.retry),
      processing: sum((o) => o.depth.processing),
      dead: sum((o) => o.depth.dead),
    },
    oldest_queued_age_ms: ages.length === 0 ? null : Math.max(...ages),
    consumers: [...consumers.values()].sort((a, b) => a.id.localeCompare(b.id)),
    dead_letters_by_reason: byReason,
    stored_total: sum((o) => o.stored_total),
  };
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
    oldest_queued_age_ms: oldest === null ? null : ageOf(oldest, now) ?? null,
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

/**
 * Milliseconds since the API enqueued `item`, or `undefined` when it carries
 * no `enqueued_at`. Never negative: the API's clock may run ahead of ours.
 */
export function ageOf(item: string, now: number): number | undefined {
  const enqueuedAt = enqueuedAtOf(item);
  return enqueuedAt === undefined ? undefined : Math.max(0, now - enqueuedAt);
}
