/**
 * A {@linkcode Clock} whose time moves only when a test says so: its timers
 * fire in order as the test advances it, so a test of a five-second backoff or
 * a two-second deadline takes no time at all.
 *
 * @module
 */

import type { Clock } from "./clock.ts";

interface ManualTimer {
  at: number;
  readonly every?: number;
  readonly fire: () => void;
}

/** Lets every callback already due run: one real turn of 0 ms, so nothing waits. */
function turn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** Time that moves only when the test says so. */
export class ManualClock implements Clock {
  #now: number;
  #timers: ManualTimer[] = [];

  /** Starts at `start` ms since the epoch. */
  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        this.#timers = this.#timers.filter((t) => t !== timer);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer: ManualTimer = { at: this.#now + Math.max(0, ms), fire: done };
      this.#timers.push(timer);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  every(ms: number, tick: () => void): () => void {
    const timer: ManualTimer = { at: this.#now + ms, every: ms, fire: tick };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Timers not yet fired (intervals count until cancelled). */
  get pending(): number {
    return this.#timers.length;
  }

  /**
   * Moves to the earliest timer due by `until` and fires it, at once (what the
   * timer's callbacks do next happens on later turns); false when there is
   * none.
   */
  next(until = Infinity): boolean {
    let earliest: ManualTimer | undefined;
    for (const timer of this.#timers) {
      if (timer.at <= until && (earliest === undefined || timer.at < earliest.at)) {
        earliest = timer;
      }
    }
    if (earliest === undefined) return false;
    this.#now = Math.max(this.#now, earliest.at);
    if (earliest.every === undefined) this.#timers = this.#timers.filter((t) => t !== earliest);
    else earliest.at += earliest.every;
    earliest.fire();
    return true;
  }

  /**
   * Moves time `ms` forward, firing in order every timer due meanwhile,
   * including those set by the callbacks of earlier ones, each on a turn of
   * its own.
   */
  async tick(ms: number): Promise<void> {
    const until = this.#now + ms;
    await turn();
    while (this.next(until)) await turn();
    this.#now = until;
  }
}
