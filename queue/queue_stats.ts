/**
 * How the queue is doing, read from Redis for the metrics: the size of every
 * list and the age of the oldest item waiting in the main list and in the
 * retry list, the number to alert on (a backlog that drains is fine; one whose
 * oldest item keeps ageing is not).
 *
 * Reading the oldest item is O(1) whatever the backlog: the API pushes at the
 * left and consumers take from the right (a handed-back item is pushed back at
 * the right, as the first to take), so the oldest is `LINDEX <list> -1`, and
 * its envelope says when the API enqueued it.
 *
 * @module
 */

import { enqueuedAtOf } from "./envelope.ts";
import { shardList } from "./keys.ts";
import {
  mergeOverviews,
  type Overview,
  overviewFromReply,
  overviewReply,
  type ReadQueueOptions,
} from "./overview.ts";
import type { RedisClient } from "./scripts.ts";

/** A snapshot of the queue. */
export interface QueueStats {
  readonly depth: Overview["depth"];
  /**
   * Seconds since the API enqueued the oldest item of each list: 0 for an
   * empty list, `undefined` when that item is not an envelope (poison, whose
   * age is unknown; it is dead-lettered when taken).
   */
  readonly oldestAgeSeconds: Readonly<Record<"queued" | "retry", number | undefined>>;
}

/**
 * Reads the queue's depth and the age of its oldest items: the overview
 * script's round trips (`overview.ts`), per shard, side by side; the depths
 * add up and the oldest item of any shard gives the age.
 */
export async function readQueueStats(
  redis: RedisClient,
  { keys, now = Date.now() }: ReadQueueOptions,
): Promise<QueueStats> {
  const replies = await Promise.all(
    shardList(keys).map((shard) => overviewReply(redis, shard)),
  );
  // The oldest known age; unknown only when no shard has a known item waiting.
  const oldest = (ages: (number | undefined)[]) => {
    const known = Math.max(0, ...ages.filter((age) => age !== undefined));
    return known === 0 && ages.includes(undefined) ? undefined : known;
  };
  return {
    depth: mergeOverviews(replies.map((reply) => overviewFromReply(reply, now))).depth,
    oldestAgeSeconds: {
      queued: oldest(replies.map(([, , , item]) => ageOf(item, now))),
      retry: oldest(replies.map((reply) => ageOf(reply[7], now))),
    },
  };
}

/**
 * The age in seconds of an item (0 for none), or `undefined` when it carries
 * no `enqueued_at`. Never negative: the API's clock may run ahead of ours.
 */
export function ageOf(item: string | null, now: number): number | undefined {
  if (item === null) return 0;
  const enqueuedAt = enqueuedAtOf(item);
  return enqueuedAt === undefined ? undefined : Math.max(0, now - enqueuedAt) / 1_000;
}
