/**
 * Time as the consumer loop sees it: the current time, a pause, and a
 * repeating timer. The loop takes a clock rather than calling `Date.now()` and
 * `setTimeout` itself so that its tests can step time forward (a five-second
 * backoff, a twenty-second shutdown deadline) without waiting for it.
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
