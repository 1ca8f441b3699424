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
 * through the fetch script and its fencing check (`scripts.ts`).
 *
 * @module
 */

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
}

/**
 * Resolves true when the main list has an item, false when the timeout passed
 * first; rejects (after reconnecting `blocking`) when no reply came in time.
 */
export async function waitForItems(
  blocking: BlockingConnection,
  { queue, timeoutSeconds, graceMs = 1_000 }: WaitForItemsOptions,
): Promise<boolean> {
  const boundMs = timeoutSeconds * 1_000 + graceMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      blocking.disconnect(true);
      reject(
        new Error(
          `Cannot wait for items as the blocking read got no reply: none within ${boundMs} ms; reconnecting`,
        ),
      );
    }, boundMs);
  });
  try {
    const item = await Promise.race([
      blocking.blmove(queue, queue, "RIGHT", "RIGHT", timeoutSeconds),
      bound,
    ]);
    return item !== null;
  } finally {
    clearTimeout(timer);
  }
}
