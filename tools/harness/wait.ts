/**
 * Waiting, for every piece of tooling (native stack, benchmark, tests): one
 * delay, one readiness poll, and the HTTP readiness check built on it, so a
 * timeout reads the same wherever it fires. Readiness is a condition on the
 * real thing (an answer from `/readyz`, a PING, a row count, a structured log
 * event), never a line of log prose.
 *
 * @module
 */

/** Resolves after `ms` milliseconds. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Options of {@linkcode waitFor}. */
export interface WaitForOptions {
  /** How long to keep checking. @default 30_000 */
  timeoutMs?: number;
  /** The pause between two checks. @default 50 */
  intervalMs?: number;
}

/**
 * Polls `check` every `intervalMs` until it returns true and returns the
 * milliseconds that took. An error thrown by `check` (the process being waited
 * for has exited, say) ends the wait at once. `what` may be a function, read
 * only when the wait times out, to tell what was seen last.
 *
 * @throws {Error} naming `what` when it is still false after `timeoutMs`.
 */
export async function waitFor(
  what: string | (() => string),
  check: () => Promise<boolean> | boolean,
  options: WaitForOptions = {},
): Promise<number> {
  const { timeoutMs = 30_000, intervalMs = 50 } = options;
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) {
      const described = typeof what === "function" ? what() : what;
      throw new Error(`Cannot wait any longer for ${described}: not true after ${timeoutMs} ms`);
    }
    await delay(intervalMs);
  }
  return Date.now() - start;
}

/** Options of {@linkcode waitForHttp}. */
export interface WaitForHttpOptions extends WaitForOptions {
  /**
   * Whether the process that should answer still runs (or will be restarted);
   * once false the wait ends at once. @default always true
   */
  alive?: () => boolean;
  /** The longest one request may take. @default 2_000 */
  requestTimeoutMs?: number;
}

/**
 * Polls `url` (a `/readyz` endpoint) until it answers 200 and returns the
 * milliseconds that took: how the stack, the benchmark and the tests decide
 * that an API or a consumer (or Traefik in front of the APIs) can do its job.
 *
 * @throws {Error} when `alive()` turns false, or with the last answer after `timeoutMs`.
 */
export async function waitForHttp(url: string, options: WaitForHttpOptions = {}): Promise<number> {
  const { alive = () => true, requestTimeoutMs = 2_000, ...wait } = options;
  let last = "no answer";
  return await waitFor(() => `${url} to answer 200 (last answer: ${last})`, async () => {
    if (!alive()) {
      throw new Error(`Cannot reach ${url} as its process exited: last answer was ${last}`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(requestTimeoutMs) });
      await response.body?.cancel();
      last = `status ${response.status}`;
      return response.status === 200;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
      return false;
    }
  }, { intervalMs: 100, ...wait });
}
