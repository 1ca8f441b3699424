/**
 * Time as the product's waits see it: the current time, a pause, and a
 * repeating timer. Code that waits takes a clock rather than calling
 * `Date.now()` and `setTimeout` itself so that its tests can step time
 * forward (a five-second backoff, a twenty-second shutdown deadline, a
 * request's bound) without waiting for it: they pass a
 * {@linkcode ManualClock} (`runtime/manual_clock.ts`), the process runs on
 * {@linkcode systemClock}. Deadlines (`runtime/deadline.ts`) are built on it.
 *
 * @module
 */

/** A source of time and timers. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Resolves after `ms` milliseconds, or at once when `signal` aborts (and then holds no timer). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `tick` every `ms` milliseconds until the returned function is called. */
  every(ms: number, tick: () => void): () => void;
}

/** Real time: what the process runs on. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
    }),
  every(ms, tick) {
    const timer = setInterval(tick, ms);
    return () => clearInterval(timer);
  },
};

/** When {@linkcode after} fires: `ms` milliseconds from now on `clock`. */
export interface After {
  readonly clock: Clock;
  readonly ms: number;
}

/**
 * Calls `fire` once, `ms` milliseconds from now on `clock`, unless the
 * returned function is called first.
 *
 * Why a repeating timer cancelled at its first tick rather than a sleep: it
 * is cancelled by a call, where a cancellable sleep needs an `AbortSignal`
 * (a controller, a listener, an event) each time, which costs several times
 * the timer itself on the API's hot path, where timers are set and cancelled
 * for every few requests.
 */
export function after({ clock, ms }: After, fire: () => void): () => void {
  const cancel = clock.every(Math.max(0, ms), () => {
    cancel();
    fire();
  });
  return cancel;
}
