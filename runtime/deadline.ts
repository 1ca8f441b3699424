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
      // (tests/integration/deadline_stall_test.ts stalls the process past the bound).
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

interface Waiting {
  readonly due: number;
  readonly reject: (error: DeadlineError) => void;
  settled: boolean;
}

/**
 * {@linkcode withDeadline} for many waits that share one bound (every push
 * of the API waits at most REDIS_TIMEOUT_MS), on one timer instead of one
 * each.
 *
 * Why: at thousands of requests a second a timer per request is a cost of
 * its own (setting and clearing a Node `Timeout`, with a `Promise.race` on
 * top), though nearly every one is cleared unfired. With
 * one bound for all, the waits expire in the order they began, so they are
 * kept oldest first and one timer is armed, for the oldest unsettled one;
 * settled waits leave from the front as they go, so the list holds about
 * the waits in flight, and the timer is cleared whenever it empties (no
 * timer outlives the last wait).
 *
 * What stays exactly as with {@linkcode withDeadline}: a wait never lasts
 * much past `ms`, it rejects with the same {@linkcode DeadlineError}, and an
 * expired wait is rejected one 0-ms timer later, so a reply that arrived
 * while the process was stalled is taken first.
 */
export class SharedDeadline {
  readonly #ms: number;
  readonly #what: string;
  readonly #now: () => number;
  #waiting: Waiting[] = [];
  /** Index of the oldest wait still in {@linkcode #waiting}. */
  #first = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** Every wait gets at most `ms` (finite); `what` completes "Cannot …" in the error. */
  constructor(ms: number, what: string, now: () => number = Date.now) {
    if (!Number.isFinite(ms)) throw new RangeError(`Cannot share a deadline of ${ms} ms`);
    this.#ms = Math.max(0, ms);
    this.#what = what;
    this.#now = now;
  }

  /** Waits currently bounded (for tests). */
  get pending(): number {
    return this.#waiting.length - this.#first;
  }

  /** Settles like `work`, or rejects with a {@linkcode DeadlineError} once the bound passed first. */
  race<T>(work: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiting: Waiting = { due: this.#now() + this.#ms, reject, settled: false };
      this.#waiting.push(waiting);
      if (this.#timer === undefined) this.#arm(waiting.due);
      work.then(
        (value) => {
          if (this.#settle(waiting)) resolve(value);
        },
        (error) => {
          // A rejection after the deadline is handled here, and ignored.
          if (this.#settle(waiting)) reject(error);
        },
      );
    });
  }

  /** Marks `waiting` settled (false if the deadline got there first) and drops settled waits. */
  #settle(waiting: Waiting): boolean {
    if (waiting.settled) return false;
    waiting.settled = true;
    this.#dropSettled();
    return true;
  }

  #dropSettled(): void {
    const list = this.#waiting;
    while (this.#first < list.length && list[this.#first]!.settled) this.#first++;
    if (this.#first === list.length) {
      this.#waiting = [];
      this.#first = 0;
      clearTimeout(this.#timer);
      this.#timer = undefined;
    } else if (this.#first > 1024 && this.#first * 2 > list.length) {
      this.#waiting = list.slice(this.#first);
      this.#first = 0;
    }
  }

  #arm(due: number): void {
    this.#timer = setTimeout(() => this.#expire(), Math.max(0, due - this.#now()));
  }

  #expire(): void {
    this.#timer = undefined;
    const now = this.#now();
    const expired: Waiting[] = [];
    const list = this.#waiting;
    for (let i = this.#first; i < list.length && list[i]!.due <= now; i++) {
      if (!list[i]!.settled) expired.push(list[i]!);
    }
    if (expired.length > 0) {
      // One more turn before giving up (see withDeadline): a reply already
      // waiting in a socket settles its wait first.
      setTimeout(() => {
        const error = new DeadlineError(
          `Cannot ${this.#what}: no answer within ${this.#ms} ms`,
          this.#ms,
        );
        for (const waiting of expired) {
          if (!waiting.settled) {
            waiting.settled = true;
            waiting.reject(error);
          }
        }
        this.#dropSettled();
      }, 0);
    }
    // The oldest wait not expired yet sets the next firing.
    for (let i = this.#first; i < list.length; i++) {
      const waiting = list[i]!;
      if (!waiting.settled && waiting.due > now) {
        this.#arm(waiting.due);
        return;
      }
    }
  }
}
