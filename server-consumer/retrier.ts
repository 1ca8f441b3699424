/**
 * The consumer's calls to Redis and PostgreSQL, retried until they succeed:
 * every error is taken as transient (data errors never reach here: the
 * writer turns them into rejects), with capped exponential backoff and
 * jitter, and each outage reported when it starts and when it ends.
 *
 * Shutdown is two-phase here: once stopping, a call made while idle is given
 * up at once, even mid-attempt; one `finishing` the work in hand is retried
 * until the shutdown deadline, then given up too, even mid-attempt. Either
 * way the call rejects with {@linkcode Abandoned}.
 *
 * @module
 */

import { abortable, withDeadline } from "@users-pipeline/runtime/deadline";
import { FencedError } from "@users-pipeline/queue";
import { backoffDelay, type Dependency, Outage } from "./backoff.ts";
import type { Clock } from "@users-pipeline/runtime/clock";
import type { ConsumerEvent, ConsumerMeasurement } from "./consumer_events.ts";

/** Raised when a call is given up because the consumer is stopping. */
export class Abandoned extends Error {
  /** True when the shutdown deadline passed with work in hand; false when nothing was in hand. */
  readonly deadline: boolean;

  constructor(deadline: boolean) {
    super(deadline ? "the shutdown deadline passed" : "the consumer is stopping");
    this.deadline = deadline;
  }
}

/** Options of {@linkcode Retrier}. */
export interface RetrierOptions {
  readonly clock: Clock;
  /** The longest backoff pause. */
  readonly retryMaxDelayMs: number;
  /** Receives the outages' start and end. */
  readonly onEvent: (event: ConsumerEvent) => void;
  /** Receives each failed call. */
  readonly onMeasurement: (measurement: ConsumerMeasurement) => void;
}

/** Options of {@linkcode Retrier.retry}. */
export interface RetryOptions {
  /**
   * The call finishes work in hand: retried until the shutdown deadline
   * rather than given up at stop. @default false
   */
  readonly finishing?: boolean;
}

/** Retries the consumer's calls, and gives them up on stop (see the module doc). */
export class Retrier {
  readonly #options: RetrierOptions;
  readonly #outages: Record<Dependency, Outage>;
  /** Aborted by {@linkcode stop}: calls made while idle are given up. */
  readonly #stopped = new AbortController();
  /** Aborted by {@linkcode passDeadline}: every call is given up. */
  readonly #deadline = new AbortController();

  constructor(options: RetrierOptions) {
    this.#options = options;
    const outage = { onEvent: options.onEvent, now: () => options.clock.now() };
    this.#outages = {
      redis: new Outage("redis", outage),
      postgres: new Outage("postgres", outage),
    };
  }

  /** True once {@linkcode stop} was called. */
  get stopping(): boolean {
    return this.#stopped.signal.aborted;
  }

  /** Gives up calls made while idle, now and from now on. */
  stop(): void {
    this.#stopped.abort(new Abandoned(false));
  }

  /** Gives up every call, now and from now on: the shutdown deadline passed. */
  passDeadline(): void {
    this.#deadline.abort(new Abandoned(true));
  }

  /**
   * Calls `work` against `dependency` until it succeeds or is given up. A
   * {@linkcode FencedError} is an answer, not a failure: it is passed on at
   * once.
   */
  async retry<T>(
    dependency: Dependency,
    work: () => Promise<T>,
    { finishing = false }: RetryOptions = {},
  ): Promise<T> {
    const { clock, retryMaxDelayMs, onMeasurement } = this.#options;
    const outage = this.#outages[dependency];
    const signal = finishing ? this.#deadline.signal : this.#stopped.signal;
    for (;;) {
      if (signal.aborted) throw new Abandoned(finishing);
      try {
        const result = await abortable(work(), signal);
        outage.succeeded();
        return result;
      } catch (error) {
        if (error instanceof Abandoned) throw error;
        if (error instanceof FencedError) {
          outage.succeeded();
          throw error;
        }
        outage.failed(error);
        onMeasurement({ type: "call_failed", dependency, error });
        await clock.sleep(backoffDelay(outage.failures - 1, { maxMs: retryMaxDelayMs }), signal);
      }
    }
  }

  /**
   * `work`, or a {@linkcode DeadlineError} (`Cannot <what>: …`) once `ms`
   * passed on the consumer's clock: `runtime/deadline.ts`'s bound, on the
   * clock the tests step.
   */
  within<T>(work: Promise<T>, { ms, what }: { ms: number; what: string }): Promise<T> {
    return withDeadline(work, { ms, what, clock: this.#options.clock });
  }
}
