/**
 * A queue filled and read the way tests and benchmarks need: every user
 * pushed with the API's own script, and the size of every list.
 *
 * @module
 */

import {
  QueueFullError,
  type QueueKeys,
  readOverview,
  type RedisClient,
  type ShardedQueue,
  type UserEnvelope,
} from "@users-pipeline/queue";

/**
 * Pushes every user into its shard, each shard's share in one script call;
 * rejects with {@linkcode QueueFullError} when a shard could not take all of
 * its share under `maxLength`.
 */
export async function enqueueAll(
  queue: ShardedQueue,
  users: readonly UserEnvelope[],
  maxLength: number = Number.MAX_SAFE_INTEGER,
): Promise<void> {
  const byShard = Map.groupBy(users, (user) => queue.shardIndexOf(user.id));
  await Promise.all([...byShard].map(async ([shard, share]) => {
    const pushed = await queue.pushes[shard]!.enqueueFitting(share, { maxLength });
    if (pushed < share.length) throw new QueueFullError(maxLength);
  }));
}

/** How many items each list holds, summed over the shards (the overview's depth). */
export async function depthOf(
  redis: RedisClient,
  keys: QueueKeys | readonly QueueKeys[],
): Promise<{ queued: number; retry: number; processing: number; dead: number }> {
  return (await readOverview(redis, { keys })).depth;
}
