/**
 * The delivery contract: what an item on the queue is (the envelope), where
 * it lives (the keys of each shard), and every move it makes between the
 * lists, each one atomic in a Lua script (`lua/`). The API pushes through
 * {@linkcode ShardedQueue}; the consumer fetches, acknowledges and hands back
 * through it; the admin routes, the dashboard, the CLI and the consumer's
 * gauges read one overview.
 *
 * The guarantees it keeps are stated in
 * `docs/delivery.md#how-the-code-keeps-it`.
 *
 * @module
 */

export * from "./envelope.ts";
export * from "./keys.ts";
export * from "./batch.ts";
export * from "./confirmed_write.ts";
export * from "./push_errors.ts";
export * from "./shard_pushes.ts";
export * from "./redis_queue.ts";
export * from "./sharded_queue.ts";
export * from "./dead_letters.ts";
export * from "./overview.ts";
export * from "./queue_stats.ts";
export { SCRIPTS_WITH_KEY_COUNT } from "./scripts.ts";
export type { RedisClient } from "./lua_script.ts";
