/**
 * The consumer's wait for work: block on the main list until it has an item
 * or a short server-side timeout passes, on a connection of its own (a blocked
 * connection serves nobody else).
 *
 * Why short: the loop checks for shutdown between waits, and a wait that ends
 * every few seconds also notices a Redis restart. Why a client-side bound as
 * well: if a reconnect loses the reply (a known ioredis failure mode), the
 * call would hang forever; a second past the server's timeout the connection
 * is dropped and the wait fails, and the caller retries it like any other
 * failed call.
 *
 * `BLMOVE q q RIGHT RIGHT` pops the last item and pushes it straight back to
 * the same end: a wait that takes nothing, so every actual move still goes
 * through the fetch script and its fencing check (`lua/fetch.lua`).
 *
 * Several shards: one blocking call watches one list (in a Redis Cluster all
 * the keys of a command must share a slot, and shards are in different
 * slots by design), and the popping multi-key waits (BRPOP, BLMPOP) would
 * take an item out of Redis' hands, to be lost if the consumer died before
 * putting it back. So {@linkcode rotatingWait} watches one shard per wait,
 * the next one each time, with the timeout divided by the number of shards
 * (at least {@linkcode MIN_SHARD_WAIT_SECONDS}). An item pushed to the shard
 * being watched ends the wait at once; one pushed to another shard is found
 * when the wait ends and the consumer's fetch looks at every shard: an idle
 * consumer notices new work within max(BLOCK_TIMEOUT_SECONDS / K, 0.1 s).
 * The price is that an idle consumer's fetch visits all K shards after each
 * wait: about K² / BLOCK_TIMEOUT_SECONDS script calls per second (18 for
 * K = 6 and 2 s), 10·K past K = 20. Busy consumers do not wait.
 *
 * @module
 */

import type { Clock } from "@users-pipeline/runtime/clock";
import { abortable, timeoutSignal } from "@users-pipeline/runtime/deadline";

/**
 * The shortest wait on one shard: waits shorter than this would have an idle
 * consumer spend its time (and Redis') polling.
 */
export const MIN_SHARD_WAIT_SECONDS = 0.1;

/** What the wait needs of its connection; an ioredis `Redis` provides it. */
export interface BlockingConnection {
  blmove(
    source: string,
    destination: string,
    from: "RIGHT",
    to: "RIGHT",
    timeoutSeconds: number,
  ): Promise<string | null>;
  disconnect(reconnect?: boolean): void;
}

/** Options of {@linkcode waitForItems}. */
export interface WaitForItemsOptions {
  /** The main list's key (`QueueKeys.queue`). */
  readonly queue: string;
  /** The server-side timeout. */
  readonly timeoutSeconds: number;
  /**
   * How long past the server-side timeout a reply may take before the
   * connection is presumed broken.
   * @default 1000
   */
  readonly graceMs?: number;
  /** Whose time the bound is counted on. @default systemClock */
  readonly clock?: Clock;
}

/**
 * Resolves true when the main list has an item, false when the timeout passed
 * first; rejects (after reconnecting `blocking`) when no reply came in time.
 */
export async function waitForItems(
  blocking: BlockingConnection,
  { queue, timeoutSeconds, graceMs = 1_000, clock }: WaitForItemsOptions,
): Promise<boolean> {
  const boundMs = timeoutSeconds * 1_000 + graceMs;
  using bound = timeoutSignal(boundMs, {
    clock,
    reason: () =>
      new Error(
        `Cannot wait for items as the blocking read got no reply: none within ${boundMs} ms; reconnecting`,
      ),
  });
  bound.signal.addEventListener("abort", () => blocking.disconnect(true), { once: true });
  const item = await abortable(
    blocking.blmove(queue, queue, "RIGHT", "RIGHT", timeoutSeconds),
    bound.signal,
  );
  return item !== null;
}

/**
 * A wait over the main lists of several shards (`queues`, one per shard):
 * each call watches the next shard in turn, for `timeoutSeconds` divided by
 * their number (at least {@linkcode MIN_SHARD_WAIT_SECONDS}, in whole ms).
 * With one shard it is {@linkcode waitForItems} itself.
 */
export function rotatingWait(
  blocking: BlockingConnection,
  queues: readonly string[],
): (timeoutSeconds: number) => Promise<boolean> {
  if (queues.length === 0) throw new RangeError("Cannot wait on no lists");
  let next = 0;
  return (timeoutSeconds) => {
    const queue = queues[next]!;
    next = (next + 1) % queues.length;
    const share = queues.length === 1 ? timeoutSeconds : Math.max(
      MIN_SHARD_WAIT_SECONDS,
      Math.round(timeoutSeconds * 1_000 / queues.length) / 1_000,
    );
    return waitForItems(blocking, { queue, timeoutSeconds: share });
  };
}
