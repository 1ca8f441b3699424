/**
 * Waiting, for every piece of tooling (native stack, benchmark, tests): one
 * delay and one readiness poll, so a timeout reads the same wherever it fires.
 *
 * @module
 */

/** Resolves after `ms` milliseconds. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Polls `check` every `intervalMs` until it returns true and returns the
 * milliseconds that took.
 *
 * @throws {Error} naming `what` when it is still false after `timeoutMs`.
 */
export async function waitFor(
  what: string,
  check: () => Promise<boolean> | boolean,
  { timeoutMs = 30_000, intervalMs = 50 } = {},
): Promise<number> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) {
      throw new Error(`Cannot wait any longer for ${what}: not true after ${timeoutMs} ms`);
    }
    await delay(intervalMs);
  }
  return Date.now() - start;
}
