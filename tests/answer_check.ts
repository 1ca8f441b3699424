/**
 * The fault suite's verdict on the answers themselves, beside
 * `delivery_check.ts`'s verdict on what was stored: every request of the
 * load posts a valid user, so anything but a 202 needs a reason.
 *
 * A scenario records its faults as time windows, each naming the answers it
 * explains, told apart by their code (`server/api_error.ts`), never their text:
 * - `full`: a 503 `queue_full` (the queue is at QUEUE_MAX_LENGTH);
 * - `unavailable`: a 503 `queue_unavailable` (Redis is down, frozen or at
 *   its maxmemory);
 * - `cut`: a connection that broke or was refused (an API was killed or
 *   stopped).
 *
 * An answer is explained when its request, from sending to answer, overlaps a
 * window that names it. Nothing explains a 4xx or any other 503 to a valid
 * request, nor a request that got no answer at all within the load's timeout
 * (a hang): no scenario's fault excuses those, since even a frozen Redis must
 * get a prompt 503. Indeterminate answers are counted against the scenario's
 * bound as well.
 *
 * @module
 */

import type { ErrorCode } from "../server/api_error.ts";
import type { Outcome } from "./fault_load.ts";

/** The API's code for a queue at its bound. */
export const QUEUE_FULL = "queue_full" satisfies ErrorCode;
/** The API's code when Redis refused or did not answer the push in time. */
export const QUEUE_UNAVAILABLE = "queue_unavailable" satisfies ErrorCode;

/** An answer other than 202 that a fault can explain. */
export type Excuse = "full" | "unavailable" | "cut";

/** A fault a scenario caused on purpose, and the answers it explains. */
export interface Fault {
  /** What happened, for messages: "Redis frozen". */
  readonly what: string;
  /** When it began (ms since the epoch). */
  readonly from: number;
  /** When its effect ended, grace included (ms since the epoch); Infinity while it lasts. */
  readonly to: number;
  readonly excuses: readonly Excuse[];
}

/** Options of {@linkcode checkAnswers}. */
export interface AnswerCheckOptions {
  /** Most indeterminate answers the scenario's faults may cause. @default 0 */
  readonly maxIndeterminate?: number;
}

/** What {@linkcode checkAnswers} found. */
export interface AnswerReport {
  /** Unexplained answers, one line per kind with examples; empty when all is well. */
  readonly problems: readonly string[];
  /** How many answers each fault explained, by its `what`. */
  readonly explained: ReadonlyMap<string, number>;
}

/**
 * Checks that every answer other than 202 overlaps a fault that explains it
 * and that the indeterminate ones stay within the bound. Forbidden answers (a
 * 500, a 503 without Retry-After) are `checkDelivery`'s to report.
 */
export function checkAnswers(
  outcomes: readonly Outcome[],
  faults: readonly Fault[],
  options: AnswerCheckOptions = {},
): AnswerReport {
  const { maxIndeterminate = 0 } = options;
  const unexplained = new Map<string, Outcome[]>();
  const explained = new Map<string, number>();
  let indeterminate = 0;
  for (const outcome of outcomes) {
    if (outcome.kind === "accepted" || outcome.kind === "unexpected") continue;
    if (outcome.kind === "indeterminate") indeterminate++;
    const excuse = excuseFor(outcome);
    const fault = excuse === undefined
      ? undefined
      : faults.find((f) => f.excuses.includes(excuse) && overlaps(outcome, f));
    if (fault !== undefined) {
      explained.set(fault.what, (explained.get(fault.what) ?? 0) + 1);
      continue;
    }
    const what = describe(outcome, excuse);
    unexplained.set(what, [...(unexplained.get(what) ?? []), outcome]);
  }
  const problems = [...unexplained].map(([what, list]) =>
    `${list.length} × ${what} (e.g. ${
      list.slice(0, 3).map((o) => `${o.name} sent at ${o.sentAt}, ${o.ms} ms`).join("; ")
    })`
  );
  if (indeterminate > maxIndeterminate) {
    problems.push(
      `${indeterminate} indeterminate answers where at most ${maxIndeterminate} may be`,
    );
  }
  return { problems, explained };
}

/** The fault kind that could explain `outcome`, or undefined when none could. */
function excuseFor(outcome: Outcome): Excuse | undefined {
  if (outcome.kind === "indeterminate") return outcome.timedOut ? undefined : "cut";
  if (outcome.status === 503 && outcome.code === QUEUE_FULL) return "full";
  if (outcome.status === 503 && outcome.code === QUEUE_UNAVAILABLE) return "unavailable";
  return undefined;
}

function describe(outcome: Outcome, excuse: Excuse | undefined): string {
  if (outcome.kind === "indeterminate") {
    return outcome.timedOut
      ? "no answer within the load's timeout (a hang)"
      : `connection cut (${outcome.detail}) outside any API kill or stop`;
  }
  const answer = `${outcome.status} ${outcome.code ?? "(no code)"} "${outcome.detail}"`;
  return excuse === undefined
    ? `${answer} to a valid request`
    : `${answer} outside any fault that explains it`;
}

function overlaps(outcome: Outcome, fault: Fault): boolean {
  return outcome.sentAt <= fault.to && outcome.sentAt + outcome.ms >= fault.from;
}

/** What {@linkcode holdTooSlowAsIndeterminate} returns. */
export interface TooSlowHeld {
  /** The outcomes, each too-slow 503 turned indeterminate (stored once or not at all). */
  readonly outcomes: readonly Outcome[];
  /** The too-slow 503s, as they now are in `outcomes`. */
  readonly tooSlow: readonly Outcome[];
  /** A line for the assertion when more than the bound were too slow; undefined otherwise. */
  readonly problem: string | undefined;
}

/**
 * For a load with no Redis fault in it (a scale, a rolling update): the API's 503
 * `queue_unavailable` can then only be its own bound, REDIS_TIMEOUT_MS, outlived by a push on a
 * starved machine. The contract makes such an answer indeterminate, not a refusal: Redis may have
 * run the push in time and its reply been read too late (README, "Every answer is prompt"), so it
 * is held like a request cut off, stored once or not at all, and a duplicate still fails. More of
 * them than `maxShare` of the load is reported as a problem: at that rate it is the pipeline, not
 * a moment of starvation, and the test should say so.
 */
export function holdTooSlowAsIndeterminate(
  outcomes: readonly Outcome[],
  maxShare = 0.05,
): TooSlowHeld {
  const held = outcomes.map((o): Outcome =>
    o.kind === "rejected" && o.status === 503 && o.code === QUEUE_UNAVAILABLE
      ? { ...o, kind: "indeterminate" }
      : o
  );
  const tooSlow = held.filter((o, i) => o !== outcomes[i]);
  const problem = tooSlow.length > outcomes.length * maxShare
    ? `${tooSlow.length} of ${outcomes.length} answered 503 as the queue was too slow, more than ` +
      `${maxShare * 100}%`
    : undefined;
  return { outcomes: held, tooSlow, problem };
}
