/**
 * Waiting out a failing dependency: capped exponential backoff with full
 * jitter (so a fleet of consumers does not retry in lockstep), and an outage
 * tracker that reports once when the trouble starts and once when it ends,
 * not on every retry.
 *
 * @module
 */

/** Backoff bounds. */
export interface BackoffOptions {
  /** First delay's upper bound. @default 50 */
  readonly baseMs?: number;
  /** Largest delay. @default 5000 */
  readonly maxMs?: number;
  /** Uniform in [0, 1): the jitter's source. @default Math.random */
  readonly random?: () => number;
}

/** The delay before retry number `attempt` (0-based): uniform in [0, min(max, base·2^attempt)]. */
export function backoffDelay(
  attempt: number,
  { baseMs = 50, maxMs = 5_000, random = Math.random }: BackoffOptions = {},
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(random() * ceiling);
}

/** A dependency the consumer retries. */
export type Dependency = "redis" | "postgres";

/** The start or the end of an outage. */
export type OutageEvent =
  | { readonly event: "outage_started"; readonly dependency: Dependency; readonly error: unknown }
  | {
    readonly event: "outage_ended";
    readonly dependency: Dependency;
    /** How long it lasted. */
    readonly ms: number;
    /** How many calls failed during it. */
    readonly failures: number;
  };

/** Options of {@linkcode Outage}. */
export interface OutageOptions {
  /** Receives the start and the end of each outage. */
  readonly onEvent: (event: OutageEvent) => void;
  /** The current time in ms. @default Date.now */
  readonly now?: () => number;
}

/** Tracks whether a dependency is failing and reports the transitions. */
export class Outage {
  readonly #dependency: Dependency;
  readonly #onEvent: (event: OutageEvent) => void;
  readonly #now: () => number;
  #since: number | undefined;
  #failures = 0;

  constructor(dependency: Dependency, options: OutageOptions) {
    this.#dependency = dependency;
    this.#onEvent = options.onEvent;
    this.#now = options.now ?? Date.now;
  }

  /** Consecutive failures so far (the next backoff attempt number). */
  get failures(): number {
    return this.#failures;
  }

  /** Records a failure; reports only the first of an outage. */
  failed(error: unknown): void {
    if (this.#since === undefined) {
      this.#since = this.#now();
      this.#onEvent({ event: "outage_started", dependency: this.#dependency, error });
    }
    this.#failures++;
  }

  /** Records a success; reports the end of an outage with its length. */
  succeeded(): void {
    if (this.#since !== undefined) {
      this.#onEvent({
        event: "outage_ended",
        dependency: this.#dependency,
        ms: this.#now() - this.#since,
        failures: this.#failures,
      });
      this.#since = undefined;
    }
    this.#failures = 0;
  }
}
