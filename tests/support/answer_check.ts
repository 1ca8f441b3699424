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
 * - `unconfirmed`: a 503 `unconfirmed` (fewer than REDIS_WAIT_REPLICAS
 *   replicas confirmed the push in time: a replica is away, as across a
 *   master's failover);
 * - `cut`: a connection that broke or was refused (an API was killed or
 *   stopped).
 *
 * An answer is explained when its request, from sending to answer, overlaps a
 * window that names it. Nothing explains a 4xx, any other 503 or an answer the
 * contract forbids (a 500, a 503 without Retry-After) to a valid request, nor
 * a request that got no answer at all within the load's timeout
 * (a hang): no scenario's fault excuses those, since even a frozen Redis must
 * get a prompt 503. Indeterminate answers are counted against the scenario's
 * bound as well, and with `answerWithinMs` every answer, 202 or not, is held
 * to its time: docs/delivery.md's "Every answer is prompt".
 *
 * @module
 */

import { shardOf } from "@users-pipeline/queue";
import { type ErrorCode, NO_REPLICA_READY } from "@users-pipeline/server/api_error";
import type { Outcome } from "./fault_load.ts";

/** The API's code for a queue at its bound. */
export const QUEUE_FULL = "queue_full" satisfies ErrorCode;
/** The API's code when Redis refused or did not answer the push in time. */
export const QUEUE_UNAVAILABLE = "queue_unavailable" satisfies ErrorCode;
/** The API's code for a push that WAIT did not confirm on REDIS_WAIT_REPLICAS replicas. */
export const QUEUE_UNCONFIRMED = "unconfirmed" satisfies ErrorCode;

/**
 * An answer other than 202 that a fault can explain: `full`, `unavailable` and `unconfirmed` are
 * the API's 503s (`queue_full`, `queue_unavailable`, `unconfirmed`), `cut` a connection that broke
 * or was refused, `no_replica` Traefik's own 503 while no API replica is ready (`no_replica_ready`).
 */
export type Excuse = "full" | "unavailable" | "unconfirmed" | "cut" | "no_replica";

/** A fault a scenario caused on purpose, and the answers it explains. */
export interface Fault {
  /** What happened, for messages: "Redis frozen". */
  readonly what: string;
  /** When it began (ms since the epoch). */
  readonly from: number;
  /** When its effect ended, grace included (ms since the epoch); Infinity while it lasts. */
  readonly to: number;
  readonly excuses: readonly Excuse[];
  /**
   * How much longer than `answerWithinMs` an answer overlapping it may take, and why the contract
   * allows it (Traefik retrying a refused connection on another replica, say). @default 0
   */
  readonly slowerByMs?: number;
  /**
   * The shards it hit, when not every one (a Redis Cluster master's, of `count` shards): it then
   * explains only an answer whose id is of one of them (`shardOf`), as the API's 503s after a push
   * name the id they minted. An answer that names no id (a cut connection, Traefik's 503) names
   * no shard, so such a fault never explains it: a failing Redis leaves the API up to answer.
   * @default every shard
   */
  readonly shards?: { readonly of: ReadonlySet<number>; readonly count: number };
}

/** Options of {@linkcode checkAnswers}. */
export interface AnswerCheckOptions {
  /** Most indeterminate answers the scenario's faults may cause. @default 0 */
  readonly maxIndeterminate?: number;
  /**
   * The longest any answer may take, 202 or not (a fault's `slowerByMs` adds to it for the
   * answers it overlaps): one bound for all, or each answer's own (by the API it was sent to,
   * say). @default Infinity
   */
  readonly answerWithinMs?: number | ((outcome: Outcome) => number);
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
 * and that the indeterminate ones stay within the bound. A forbidden answer (a
 * 500, a 503 without Retry-After) no fault explains: `checkDelivery` reports
 * the load's too, and the retrying client's tries are held here alone.
 */
export function checkAnswers(
  outcomes: readonly Outcome[],
  faults: readonly Fault[],
  options: AnswerCheckOptions = {},
): AnswerReport {
  const { maxIndeterminate = 0, answerWithinMs = Infinity } = options;
  const unexplained = new Map<string, Outcome[]>();
  const explained = new Map<string, number>();
  let indeterminate = 0;
  for (const outcome of outcomes) {
    if (!outcome.timedOut) {
      const bound = typeof answerWithinMs === "number" ? answerWithinMs : answerWithinMs(outcome);
      const allowed = bound +
        Math.max(0, ...faults.filter((f) => hits(outcome, f)).map((f) => f.slowerByMs ?? 0));
      if (outcome.ms > allowed) {
        const what = `answer slower than ${bound} ms (or a fault's allowance)`;
        unexplained.set(what, [...(unexplained.get(what) ?? []), outcome]);
      }
    }
    if (outcome.kind === "accepted") continue;
    if (outcome.kind === "indeterminate") indeterminate++;
    const excuse = excuseFor(outcome);
    const fault = excuse === undefined
      ? undefined
      : faults.find((f) => f.excuses.includes(excuse) && hits(outcome, f));
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
export function excuseFor(outcome: Outcome): Excuse | undefined {
  if (outcome.kind === "unexpected") return undefined;
  if (outcome.kind === "indeterminate") return outcome.timedOut ? undefined : "cut";
  if (outcome.status === 503 && outcome.code === QUEUE_FULL) return "full";
  if (outcome.status === 503 && outcome.code === QUEUE_UNAVAILABLE) return "unavailable";
  if (outcome.status === 503 && outcome.code === QUEUE_UNCONFIRMED) return "unconfirmed";
  if (outcome.status === 503 && outcome.code === NO_REPLICA_READY) return "no_replica";
  return undefined;
}

function describe(outcome: Outcome, excuse: Excuse | undefined): string {
  if (outcome.kind === "unexpected") return `answer the contract forbids: ${outcome.detail}`;
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

/** Whether `fault` hit `outcome`: its window and, when it names them, one of its shards. */
function hits(outcome: Outcome, fault: Fault): boolean {
  const { shards } = fault;
  return overlaps(outcome, fault) && (shards === undefined ||
    (outcome.id !== undefined && shards.of.has(shardOf(outcome.id, shards.count))));
}

/** Whether `outcome`'s request, from sending to answer, overlaps `fault`'s window. */
export function overlaps(outcome: Outcome, fault: Fault): boolean {
  return outcome.sentAt <= fault.to && outcome.sentAt + outcome.ms >= fault.from;
}
