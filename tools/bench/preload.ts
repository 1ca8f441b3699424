/**
 * Making the benchmark's users and putting them in a queue fast: envelopes
 * exactly as the API makes them (UUIDv7 ids, `enqueued_at` in milliseconds),
 * pushed through `enqueueAll` (the API's own script) in
 * chunks with several chunks in flight, so preloading a million takes seconds
 * rather than the hours one push per user would.
 *
 * @module
 */

import { v7 as uuidv7 } from "uuid";
import type { ShardedQueue, UserEnvelope } from "@users-pipeline/queue";
import { enqueueAll } from "@users-pipeline/harness/queue_fill";

/** `count` users named `bench user <n>`, enqueued now. */
export function benchUsers(count: number, first = 0): UserEnvelope[] {
  const now = Date.now();
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: `bench user ${first + i}`,
    enqueued_at: now,
  }));
}

/** Options of {@linkcode preloadQueue}. */
export interface PreloadOptions {
  /** Users per push: the script's LPUSH takes them as arguments. @default 1000 */
  chunk?: number;
  /** Pushes in flight at once. @default 8 */
  inFlight?: number;
}

/** The queue bound the preload passes: the largest QUEUE_MAX_LENGTH allows. */
const NO_BOUND = 100_000_000;

/** Pushes `count` fresh users onto `queue`; resolves with the seconds it took. */
export async function preloadQueue(
  queue: ShardedQueue,
  count: number,
  options: PreloadOptions = {},
): Promise<number> {
  const { chunk = 1_000, inFlight = 8 } = options;
  const start = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const first = next;
      const size = Math.min(chunk, count - first);
      next += size;
      await enqueueAll(queue, benchUsers(size, first), NO_BOUND);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return (performance.now() - start) / 1_000;
}
