/**
 * What both services answer on `GET /healthz` and `GET /readyz`, the two
 * questions an orchestrator asks (Docker's healthcheck, Traefik's health
 * check, Swarm):
 *
 * - `/healthz`, "is the process alive?": 200 `{"status":"alive"}` whenever it
 *   answers at all. Nothing else is checked, so a restart is never triggered
 *   by a dependency's outage.
 * - `/readyz`, "can it do its job right now?": 200 `{"status":"ready"}` only
 *   when it has finished starting, is not draining, and every dependency it
 *   needs answered a probe within the timeout; otherwise 503
 *   `{"status":"not ready","reason":"…"}` with `Retry-After: 1`.
 *
 * Traefik routes only to API replicas whose `/readyz` says 200, which is why
 * a replica that is stopping turns not ready first and only later closes its
 * listener (see `server/main.ts`).
 *
 * It lives beside the queue contract because, like the event log, it is what
 * both sides of the queue must answer alike for whoever watches them.
 *
 * @module
 */

import { DeadlineError, withDeadline } from "./deadline.ts";
import { errorText } from "./event_log.ts";

/** The answer to "can it do its job right now?". */
export type ReadyState =
  | { readonly ready: true }
  | { readonly ready: false; readonly reason: string };

/** A probe of one dependency: resolves when it answered, rejects with why it did not. */
export type ReadinessCheck = () => Promise<unknown>;

/** Options of {@linkcode Readiness}. */
export interface ReadinessOptions {
  /** How long each probe may take before its dependency counts as not answering. */
  readonly timeoutMs: number;
  /**
   * Not ready for this reason until {@linkcode Readiness.started} is called;
   * undefined for a service that is ready as soon as it answers HTTP.
   * @default undefined
   */
  readonly starting?: string;
}

/** The reason given while draining. */
export const DRAINING = "draining: the process is shutting down";

const NOT_READY_DRAINING: ReadyState = { ready: false, reason: DRAINING };

/** Tracks one process's readiness and answers `/readyz` and `/healthz`. */
export class Readiness {
  readonly #checks: readonly [string, ReadinessCheck][];
  readonly #timeoutMs: number;
  #starting: string | undefined;
  #probe: Promise<ReadyState> | undefined;
  /** The asks waiting for the probes, answered at once by a drain. */
  readonly #waiting = new Set<(state: ReadyState) => void>();
  #draining = false;

  /** `checks` names each dependency's probe (`redis`, `postgres`), run together on each ask. */
  constructor(checks: Readonly<Record<string, ReadinessCheck>>, options: ReadinessOptions) {
    this.#checks = Object.entries(checks);
    this.#timeoutMs = options.timeoutMs;
    this.#starting = options.starting;
  }

  /** Not ready for `reason` (a step of the start: "migrating the schema") until {@linkcode started}. */
  starting(reason: string): void {
    this.#starting = reason;
  }

  /** Done starting: ready from now on whenever the probes pass. */
  started(): void {
    this.#starting = undefined;
  }

  /** Not ready from now on, for good: the process is shutting down. */
  drain(): void {
    this.#draining = true;
    for (const answer of this.#waiting) answer(NOT_READY_DRAINING);
    this.#waiting.clear();
  }

  /** Whether {@linkcode drain} was called. */
  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Asks every dependency now. Concurrent asks share one round of probes, so
   * a frozen dependency and a health checker asking every second never pile
   * up probes; an ask made while draining, or one still waiting when draining
   * begins, is answered at once.
   */
  check(): Promise<ReadyState> {
    if (this.#draining) return Promise.resolve(NOT_READY_DRAINING);
    if (this.#starting !== undefined) {
      return Promise.resolve({ ready: false, reason: `starting: ${this.#starting}` });
    }
    const probe = this.#probe ??= this.#probeAll().finally(() => {
      this.#probe = undefined;
    });
    return new Promise((resolve) => {
      const answer = (state: ReadyState) => {
        this.#waiting.delete(answer);
        resolve(state);
      };
      this.#waiting.add(answer);
      void probe.then(answer);
    });
  }

  /** The answer to `GET /readyz`. */
  async response(): Promise<Response> {
    const state = await this.check();
    return state.ready
      ? probeAnswer({ status: "ready" }, { status: 200 })
      : probeAnswer({ status: "not ready", reason: state.reason }, {
        status: 503,
        headers: { "Retry-After": "1" },
      });
  }

  async #probeAll(): Promise<ReadyState> {
    const failures = await Promise.all(
      this.#checks.map(async ([name, check]) => {
        const problem = await this.#probeOne(check);
        return problem === undefined ? undefined : `${name}: ${problem}`;
      }),
    );
    const reasons = failures.filter((failure) => failure !== undefined);
    if (reasons.length > 0) return { ready: false, reason: reasons.join("; ") };
    // A state that changed while the probes ran wins: a drain answers at once anyway.
    if (this.#starting !== undefined) {
      return { ready: false, reason: `starting: ${this.#starting}` };
    }
    return { ready: true };
  }

  /** Why `check` failed, or undefined when it answered in time. */
  async #probeOne(check: ReadinessCheck): Promise<string | undefined> {
    try {
      await withDeadline(Promise.resolve().then(check), { ms: this.#timeoutMs, what: "probe" });
      return undefined;
    } catch (error) {
      return error instanceof DeadlineError ? `no answer within ${error.ms} ms` : errorText(error);
    }
  }
}

/** The answer to `GET /healthz`: the process answers, so it is alive. */
export function aliveResponse(): Response {
  return probeAnswer({ status: "alive" }, { status: 200 });
}

/** A probe's JSON answer; never cached, since it is only true now. */
function probeAnswer(
  body: Record<string, string>,
  { status, headers = {} }: { status: number; headers?: Record<string, string> },
): Response {
  return Response.json(body, { status, headers: { "Cache-Control": "no-store", ...headers } });
}
