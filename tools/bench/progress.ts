/**
 * The benchmark's progress lines: one per phase and one per measurement, each
 * stamped with the time since the run began, so a long run shows where it is
 * and a slow step stands out.
 *
 * @module
 */

/** Writes progress lines; `now` is injectable for tests. */
export class Progress {
  readonly #write: (line: string) => void;
  readonly #now: () => number;
  readonly #start: number;

  constructor(write: (line: string) => void = console.log, now: () => number = Date.now) {
    this.#write = write;
    this.#now = now;
    this.#start = now();
  }

  /** Seconds since the run began. */
  get elapsedSeconds(): number {
    return (this.#now() - this.#start) / 1_000;
  }

  /** Announces a phase. */
  phase(title: string): void {
    this.#write(`${this.#stamp()} == ${title}`);
  }

  /** Reports a step or a measurement within the current phase. */
  step(message: string): void {
    this.#write(`${this.#stamp()}    ${message}`);
  }

  #stamp(): string {
    return `[${this.elapsedSeconds.toFixed(1).padStart(6)} s]`;
  }
}

/** `1234567.8` → `1,234,568`: whole numbers with thousands separators. */
export function formatCount(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}
