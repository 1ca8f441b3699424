/**
 * How the API accepts a user: into the queue. The users accepted while a
 * shard's previous call is in flight (or in the same event-loop turn) go to
 * Redis in one script call (`server/grouped_pushes.ts`); a keyed request is
 * pushed alone, its record checked and written in the push's own step, in the
 * key's shard; a batch (`POST /users/batch`) is one call per shard, each
 * shard's users all or none, or, keyed, one call in the key's shard; and no
 * push is waited for longer than REDIS_TIMEOUT_MS: the
 * answer is then a 503, and the queue's own deadline makes the late push void.
 *
 * @module
 */

import { type FittingQueue, ShardedPushes } from "./grouped_pushes.ts";
import type { ShardedQueue } from "@users-pipeline/queue";
import type { AppOptions } from "./app.ts";
import type { ServerConfig } from "./config.ts";

/** What {@linkcode queueAccept} uses of the queue. */
export interface AcceptingQueue
  extends Pick<ShardedQueue, "idForKey" | "enqueueOnce" | "enqueueBatch" | "enqueueBatchOnce"> {
  readonly pushes: readonly FittingQueue[];
  shardIndexOf(id: string): number;
}

/** The app's options that accept into `queue`, each shard bounded by its share of the length. */
export function queueAccept(
  queue: AcceptingQueue,
  config: Pick<
    ServerConfig,
    | "QUEUE_MAX_LENGTH"
    | "IDEMPOTENCY_TTL_SECONDS"
    | "REDIS_TIMEOUT_MS"
    | "BATCH_MAX_ITEMS"
    | "BATCH_BODY_LIMIT_BYTES"
  >,
): Required<Pick<AppOptions, "accept" | "acceptOnce" | "acceptTimeoutMs" | "batch">> {
  const pushes = new ShardedPushes(queue.pushes, {
    maxLength: config.QUEUE_MAX_LENGTH,
    shardOf: (id) => queue.shardIndexOf(id),
  });
  return {
    accept: (user) => pushes.enqueue(user),
    acceptOnce: {
      newId: (key) => queue.idForKey(key),
      accept: (user, key) =>
        queue.enqueueOnce(user, {
          key,
          maxLength: config.QUEUE_MAX_LENGTH,
          ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
        }),
    },
    acceptTimeoutMs: config.REDIS_TIMEOUT_MS,
    // A batch is pushed by itself, not grouped with others: it is one call per shard already.
    batch: {
      accept: (users, bound) =>
        queue.enqueueBatch(users, { maxLength: config.QUEUE_MAX_LENGTH, bound }),
      acceptOnce: (users, key) =>
        queue.enqueueBatchOnce(users, {
          key,
          maxLength: config.QUEUE_MAX_LENGTH,
          ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
        }),
      maxItems: config.BATCH_MAX_ITEMS,
      bodyLimitBytes: config.BATCH_BODY_LIMIT_BYTES,
    },
  };
}
