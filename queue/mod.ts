/**
 * The queue: the envelope of an item, the keys of each shard, and
 * {@linkcode ShardedQueue}, through which the API pushes and the consumer
 * fetches, acknowledges and hands back; the dead letters and one overview
 * read for the admin routes, the dashboard, the CLI and the gauges. The
 * guarantees it keeps: `docs/delivery.md#how-the-code-keeps-it`.
 *
 * @module
 */

export {
  decodeEnvelope,
  encodeEnvelope,
  isUuid,
  NAME_MAX_LENGTH,
  nameProblem,
  PoisonMessageError,
  type UserEnvelope,
} from "./envelope.ts";
export { type QueueKeys, queueKeys, queueShards, shardOf } from "./keys.ts";
export {
  type AckOutcome,
  type Batch,
  FencedError,
  FetchedBatch,
  type FetchOptions,
  type NextFetch,
} from "./batch.ts";
export { WriteUnconfirmedError } from "./confirmed_write.ts";
export { IdempotencyConflictError, QueueFullError } from "./push_errors.ts";
export { type BatchOptions, ShardedQueue } from "./sharded_queue.ts";
export {
  DEAD_LETTER_KINDS,
  type DeadLetter,
  type DeadLetterFilter,
  type DeadLetterKind,
  type DeadLetterPage,
  DeadLetters,
  MAX_PAGE,
} from "./dead_letters.ts";
export { type Overview, type QueueStats, readOverview, readQueueStats } from "./overview.ts";
export { SCRIPTS_WITH_KEY_COUNT } from "./scripts.ts";
export type { RedisClient } from "./lua_script.ts";
