/**
 * A bound on how long a caller waits for a promise, whatever the client
 * library behind it does with its own timeouts. Both services rely on it for
 * the promises of the delivery contract that are about time: the API answers
 * every push within REDIS_TIMEOUT_MS, a readiness probe answers within its
 * timeout, and a stopping consumer hands back and closes within its grace
 * period, even while Redis or PostgreSQL is frozen.
 *
 * The bound only stops the waiting: the work itself may still complete
 * later, so whatever it does must be harmless when late (the enqueue
 * deadline, the idempotent insert, the atomic hand-back).
 *
 * @module
 */

/** Raised by {@linkcode withDeadline} when the time ran out first. */
export class DeadlineError extends Error {
  /** The bound that passed, in ms. */
  readonly ms: number;

  constructor(message: string, ms: number) {
    super(message);
    this.name = "DeadlineError";
    this.ms = ms;
  }
}

/**
 * Settles like `work`, or rejects with a {@linkcode DeadlineError} saying
 * `Cannot <what>: no answer within <ms> ms` once `ms` passed first. A later
 * rejection of `work` is handled (ignored). `Infinity` waits as long as `work`.
 */
export async function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  if (ms === Infinity) return await work;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      // One more turn before giving up: when the process itself was stalled
      // (CPU starvation, a long GC) past the bound, the expired timer runs
      // before the I/O that arrived meanwhile, and a reply already waiting in
      // the socket would lose to it: the API would answer 503 for a push Redis
      // had done. Deferred by a timer of 0 ms, the waiting reply is taken first
      // (measured: a 300 ms stall past a 200 ms bound, the reply won 6 of 20
      // times without the deferral, 20 of 20 with it).
      () =>
        timer = setTimeout(
          () => reject(new DeadlineError(`Cannot ${what}: no answer within ${ms} ms`, ms)),
          0,
        ),
      Math.max(0, ms),
    );
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
