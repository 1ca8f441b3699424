/**
 * Deadlines, one way for the whole product: a deadline is an `AbortSignal`
 * that aborts once its time passed ({@linkcode timeoutSignal}, the idea of
 * `AbortSignal.timeout`), a wait that must also end on a stop combines the
 * two with `AbortSignal.any`, and waiting on a promise under a signal is
 * {@linkcode abortable}. {@linkcode withDeadline} is the two together with a
 * {@linkcode DeadlineError}; {@linkcode SharedDeadline} is the variant for
 * the many waits of one bound on the API's hot path. Time is a
 * {@linkcode Clock} (`runtime/clock.ts`), so tests step it instead of
 * waiting.
 *
 * Both services rely on it for the promises of the delivery contract that
 * are about time: the API answers every push within REDIS_TIMEOUT_MS, a
 * readiness probe answers within its timeout, and a stopping consumer hands
 * back and closes within its grace period, even while Redis or PostgreSQL is
 * frozen, whatever the client library behind a promise does with its own
 * timeouts.
 *
 * A bound only stops the waiting: the work itself may still complete later,
 * so whatever it does must be harmless when late (the enqueue deadline, the
 * idempotent insert, the atomic hand-back).
 *
 * @module
 */

import { after, type Clock, systemClock } from "./clock.ts";

/** Raised by {@linkcode withDeadline} and {@linkcode SharedDeadline} when the time ran out first. */
export class DeadlineError extends Error {
  /** The bound that passed, in ms. */
  readonly ms: number;

  constructor(message: string, ms: number) {
    super(message);
    this.name = "DeadlineError";
    this.ms = ms;
  }
}

/** The error of a wait for `what` that got no answer within `ms`. */
function noAnswer(what: string, ms: number): DeadlineError {
  return new DeadlineError(`Cannot ${what}: no answer within ${ms} ms`, ms);
}

/** Options of {@linkcode timeoutSignal}. */
export interface TimeoutOptions {
  /** Whose time passes. @default systemClock */
  readonly clock?: Clock;
  /**
   * What the signal aborts with.
   * @default a `DOMException` named "TimeoutError", as `AbortSignal.timeout`'s
   */
  readonly reason?: () => unknown;
}

/** A signal that aborts once its time passed; disposing it cancels its timer. */
export interface Timeout extends Disposable {
  readonly signal: AbortSignal;
}

const NEVER: Timeout = { signal: new AbortController().signal, [Symbol.dispose]: () => {} };

/**
 * `AbortSignal.timeout(ms)` on `options.clock`, with a timer that is
 * cancelled when disposed (`using`), aborting two turns after `ms` passed.
 * `Infinity` never aborts and holds no timer.
 *
 * Why not `AbortSignal.timeout` itself: its timer cannot be cancelled, so
 * every wait would leave one running for its whole bound after the wait was
 * over (holding the process up at its exit, failing the tests' sanitizer);
 * it runs on real time only; and it aborts as soon as it fires.
 *
 * Why two turns late: when the process itself was stalled (CPU starvation, a
 * long GC) past the bound, the expired timer runs before the I/O that arrived
 * meanwhile, and a reply already waiting in the socket would lose to it: the
 * API would answer 503 for a push Redis had done. Deferred by a timer of
 * 0 ms, the waiting reply is taken first; but on a machine whose CPU is taken
 * by other processes, that timer can come due while the expired one still
 * runs, and Deno then runs both before it reads the socket. A second timer of
 * 0 ms lets the read in (tests/integration/deadline_stall_test.ts stalls the
 * process past the bound).
 */
export function timeoutSignal(ms: number, options: TimeoutOptions = {}): Timeout {
  if (ms === Infinity) return NEVER;
  const {
    clock = systemClock,
    reason = () => new DOMException("Signal timed out.", "TimeoutError"),
  } = options;
  const expiry = new AbortController();
  let cancel = after({ clock, ms }, () => {
    cancel = after({ clock, ms: 0 }, () => {
      cancel = after({ clock, ms: 0 }, () => expiry.abort(reason()));
    });
  });
  return { signal: expiry.signal, [Symbol.dispose]: () => cancel() };
}

/**
 * Settles like `work`, or rejects with `signal.reason` once `signal` aborted
 * first (at once if it already has). A later rejection of `work` is handled
 * (ignored).
 */
export function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => {});
    return Promise.reject(signal.reason);
  }
  let onAbort = () => {};
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  // A race, `work` first: when `work` has settled by the time the signal aborts (in the same
  // turn, before anyone saw it), its outcome wins, as a reply waiting in the socket wins over an
  // expired deadline. A consumer stopped in the turn its fetch came back keeps what it fetched.
  return Promise.race([work, aborted]).finally(() => signal.removeEventListener("abort", onAbort));
}

/** The bound of {@linkcode withDeadline} and {@linkcode SharedDeadline}. */
export interface DeadlineOptions {
  /** How long a wait may last, in milliseconds; `Infinity` waits as long as the work. */
  readonly ms: number;
  /** What is waited for: completes `Cannot <what>` in the error. */
  readonly what: string;
  /** Whose time passes. @default systemClock */
  readonly clock?: Clock;
}

/**
 * Settles like `work`, or rejects with a {@linkcode DeadlineError} saying
 * `Cannot <what>: no answer within <ms> ms` once `ms` passed first (two turns
 * late, see {@linkcode timeoutSignal}). A later rejection of `work` is
 * handled (ignored). `Infinity` waits as long as `work`.
 */
export async function withDeadline<T>(
  work: Promise<T>,
  { ms, what, clock }: DeadlineOptions,
): Promise<T> {
  if (ms === Infinity) return await work;
  using bound = timeoutSignal(ms, { clock, reason: () => noAnswer(what, ms) });
  return await abortable(work, bound.signal);
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
 * Why not a {@linkcode timeoutSignal} (or an `AbortSignal.timeout`) per wait:
 * at thousands of requests a second a timer per request is a cost of its own
 * (setting and clearing it, with a signal and its listener on top), though
 * nearly every one is cleared unfired. With one bound for all, the waits
 * expire in the order they began, so they are kept oldest first and one timer
 * is armed, for the oldest unsettled one; settled waits leave from the front
 * as they go, so the list holds about the waits in flight, and the timer is
 * cancelled whenever it empties (no timer outlives the last wait).
 *
 * What stays exactly as with {@linkcode withDeadline}: a wait never lasts
 * much past `ms`, it rejects with the same {@linkcode DeadlineError}, and an
 * expired wait is rejected one 0-ms timer later, so a reply that arrived
 * while the process was stalled is taken first.
 */
export class SharedDeadline {
  readonly #ms: number;
  readonly #what: string;
  readonly #clock: Clock;
  #waiting: Waiting[] = [];
  /** Index of the oldest wait still in {@linkcode #waiting}. */
  #first = 0;
  /** Cancels the one armed timer; undefined when none is. */
  #timer: (() => void) | undefined;

  /** Every wait gets at most `ms` (finite); `what` completes "Cannot …" in the error. */
  constructor({ ms, what, clock = systemClock }: DeadlineOptions) {
    if (!Number.isFinite(ms)) throw new RangeError(`Cannot share a deadline of ${ms} ms`);
    this.#ms = Math.max(0, ms);
    this.#what = what;
    this.#clock = clock;
  }

  /** Settles like `work`, or rejects with a {@linkcode DeadlineError} once the bound passed first. */
  race<T>(work: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiting: Waiting = { due: this.#clock.now() + this.#ms, reject, settled: false };
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
      this.#timer?.();
      this.#timer = undefined;
    } else if (this.#first > 1024 && this.#first * 2 > list.length) {
      this.#waiting = list.slice(this.#first);
      this.#first = 0;
    }
  }

  #arm(due: number): void {
    this.#timer = after(
      { clock: this.#clock, ms: due - this.#clock.now() },
      () => this.#expire(),
    );
  }

  #expire(): void {
    this.#timer = undefined;
    const now = this.#clock.now();
    const expired: Waiting[] = [];
    const list = this.#waiting;
    for (let i = this.#first; i < list.length && list[i]!.due <= now; i++) {
      if (!list[i]!.settled) expired.push(list[i]!);
    }
    if (expired.length > 0) {
      // Two more turns before giving up (see timeoutSignal): a reply already
      // waiting in a socket settles its wait first.
      void this.#clock.sleep(0).then(() => this.#clock.sleep(0)).then(() => {
        const error = noAnswer(this.#what, this.#ms);
        for (const waiting of expired) {
          if (!waiting.settled) {
            waiting.settled = true;
            waiting.reject(error);
          }
        }
        this.#dropSettled();
      });
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
