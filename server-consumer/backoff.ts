/**
 * Waiting out a failing dependency: capped exponential backoff with full
 * jitter (so a fleet of consumers does not retry in lockstep), and an outage
 * log that speaks once when the trouble starts and once when it ends, not on
 * every retry.
 *
 * @module
 */

/** Backoff bounds. */
export interface BackoffOptions {
  /** First delay's upper bound. @default 50 */
  readonly baseMs?: number;
  /** Largest delay. @default 5000 */
  readonly maxMs?: number;
}

/** The delay before retry number `attempt` (0-based): uniform in [0, min(max, base·2^attempt)]. */
export function backoffDelay(
  attempt: number,
  { baseMs = 50, maxMs = 5_000 }: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(random() * ceiling);
}

/** Tracks whether a dependency is failing and logs the transitions. */
export class Outage {
  readonly #what: string;
  readonly #log: (line: string) => void;
  #since: number | undefined;
  #failures = 0;

  constructor(what: string, log: (line: string) => void = console.error) {
    this.#what = what;
    this.#log = log;
  }

  /** Consecutive failures so far (the next backoff attempt number). */
  get failures(): number {
    return this.#failures;
  }

  /** Records a failure; logs only the first of an outage. */
  failed(error: unknown): void {
    if (this.#since === undefined) {
      this.#since = Date.now();
      const reason = error instanceof Error ? error.message : String(error);
      this.#log(`${this.#what} unavailable, retrying with backoff: ${reason}`);
    }
    this.#failures++;
  }

  /** Records a success; logs the end of an outage with its length. */
  succeeded(): void {
    if (this.#since !== undefined) {
      this.#log(`${this.#what} is back after ${Date.now() - this.#since} ms`);
      this.#since = undefined;
    }
    this.#failures = 0;
  }
}
