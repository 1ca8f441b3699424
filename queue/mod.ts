/**
 * The queue contract the API and the consumer share: the message shape, the
 * Redis keys, and the atomic operations on them.
 *
 * @module
 */

export * from "./envelope.ts";
export * from "./keys.ts";
export * from "./redis_queue.ts";
