/**
 * What fails a benchmark run, quick or full, whatever the machine. The
 * targets (targets.ts) are ratios a busy machine may miss, so they are
 * reported and never fail a run; these checks are facts about what the
 * pipeline answered and kept. The benchmark injects no fault, so the
 * contract (docs/delivery.md) leaves it no room for a refusal that only a
 * fault explains:
 *
 * - every 202 was kept: users queued (ingest: our API and the course's
 *   producer, each on its own list; the traefik phase) or stored (ingest's
 *   direct mode, end to end, overload) equal the 202s counted, neither fewer
 *   (a 202 lost) nor more (a push no 202 counted): oha waits for the requests
 *   in flight at its deadline (`--wait-ongoing-requests-after-deadline`), so
 *   it counts every answer;
 * - every drain stored every user it was given and dead-lettered none;
 * - every answer was expected: 202 in ingest and through Traefik (their queue
 *   bound is far above what a run sends); under overload, 202 or a 503
 *   `queue_full` with the queue at QUEUE_MAX_LENGTH; end to end below
 *   Traefik's ceiling, 202 or a 503 `queue_full` once the backlog reached
 *   QUEUE_MAX_LENGTH, nothing else: a `queue_unavailable`, an `unconfirmed`
 *   or Traefik's own 503 is an answer to a fault (a broken connection, a
 *   replica that did not confirm, no API replica ready), and the cause the
 *   records give it (refusals.ts) does not excuse it here. At the ceiling, a
 *   503 whose cause is recorded is reported, one no record accounts for too;
 * - end to end, at the lowest rate, oha sent what it was asked (all but
 *   {@linkcode UNSENT_SHARE_MAX}, what a rate called sustained sent too), and
 *   there and at every rate called sustained
 *   every answer came within REDIS_TIMEOUT_MS + {@linkcode ANSWER_SLACK_MS},
 *   the bound docs/delivery.md's "Every answer is prompt" holds every answer
 *   to (past what the stack sustains, requests wait in oha and answers come
 *   late: that is the measurement "not sustained", not a broken promise);
 * - the queue never outgrew QUEUE_MAX_LENGTH under overload;
 * - in the bulk phase, every request answered 202 (its bound is far above
 *   what a run queues, so no item may be refused) and every user of every
 *   202 stored, neither fewer nor more; its open-model rates are held as the
 *   end-to-end ones are;
 * - the run checked something: a run whose phases gave no check fails.
 *
 * @module
 */

import { openRuns } from "./bulk.ts";
import { drainLabel, type DrainRun } from "./drain.ts";
import { ladderRates, type RateRun, UNSENT_SHARE_MAX } from "./end_to_end.ts";
import { INGEST_TARGETS } from "./ingest.ts";
import { describeRefusals } from "./refusals.ts";
import type { BenchResults } from "./results.ts";
import { FRONT_TARGETS } from "./through_traefik.ts";

/** One check of one run. */
export interface Check {
  readonly phase: string;
  /** What must hold. */
  readonly rule: string;
  /** What this run measured. */
  readonly measured: string;
  readonly ok: boolean;
}

/**
 * What docs/delivery.md's "Every answer is prompt" allows over
 * REDIS_TIMEOUT_MS as a client times an answer: the API's timer and the
 * client's event loop may each fire late on a loaded 2-core machine.
 */
export const ANSWER_SLACK_MS = 100;

/** Every check the results allow, in phase order; a phase that did not run has none. */
export function checkResults(results: BenchResults): Check[] {
  const checks: Check[] = [];
  const { ingest, traefik, drain, endToEnd, growth, bulk } = results;
  if (ingest) {
    const measured = INGEST_TARGETS.map((target) => ({ target, runs: ingest.runs[target] }));
    for (const { target, runs } of measured) {
      const requests = runs.reduce((sum, r) => sum + r.requests, 0);
      const accepted = runs.reduce((sum, r) => sum + r.accepted, 0);
      checks.push({
        phase: "Ingest",
        rule: `${target}: every answer 202`,
        measured: `${requests - accepted} of ${requests} requests answered otherwise or not at all`,
        ok: accepted === requests,
      });
    }
    for (const { target, runs } of measured) {
      // Neither keeps anything: the floor answers and the app without Redis accepts into nothing.
      if (target === "floor" || target === "no_redis") continue;
      const where = target === "direct" ? "stored" : "queued";
      checks.push({
        phase: "Ingest",
        rule: `${target}: every 202 kept (users ${where} = 202s counted)`,
        measured: runs.map((r) => `${r.kept} ${where} / ${r.accepted}`).join(", "),
        ok: runs.every((r) => r.kept === r.accepted),
      });
    }
  }
  if (traefik) {
    for (const target of FRONT_TARGETS) {
      const runs = traefik.runs[target];
      const requests = runs.reduce((sum, r) => sum + r.requests, 0);
      const accepted = runs.reduce((sum, r) => sum + r.accepted, 0);
      checks.push({
        phase: "Traefik",
        rule: `${target}: every answer 202 (oha)`,
        measured: `${requests - accepted} of ${requests} requests answered otherwise or not at all`,
        ok: accepted === requests,
      });
      if (target === "ceiling") continue; // The no-op server keeps nothing.
      checks.push({
        phase: "Traefik",
        rule: `${target}: every 202 kept (users queued = 202s counted)`,
        measured: runs.map((r) =>
          `${r.kept} queued / ${r.accepted}` +
          (r.kept === r.accepted || r.acceptedByReplica === undefined
            ? ""
            : ` (accepted since start, by replica: ${r.acceptedByReplica.join(", ")})`)
        ).join(", "),
        ok: runs.every((r) => r.kept === r.accepted),
      });
    }
  }
  if (drain) checks.push(drainsCheck("Drain", [drain.single, drain.course, ...drain.batch]));
  if (endToEnd) {
    // The ladder's top rung is the ceiling, rounded as the ladder rounds it.
    const ceilingRate = ladderRates(endToEnd.ceiling, [1])[0]!;
    const boundMs = endToEnd.redisTimeoutMs + ANSWER_SLACK_MS;
    // The runs follow the ladder, lowest rate first.
    const lowest = endToEnd.runs[0];
    for (const run of endToEnd.runs) {
      const belowCeiling = run.offered < ceilingRate;
      checks.push({
        phase: "End to end",
        rule: `${run.offered} req/s: stored = accepted`,
        measured: `${run.stored} stored, ${run.load.accepted} accepted`,
        ok: run.stored === run.load.accepted,
      });
      if (!belowCeiling) {
        checks.push({
          phase: "End to end",
          rule:
            `${run.offered} req/s: every answer 202 or a 503 whose cause is recorded (at the ceiling: unexplained 503s reported)`,
          measured: answersMeasured(run),
          ok: run.load.failed === 0,
        });
        continue;
      }
      checks.push(answersCheck(run, endToEnd.queueMaxLength));
      // Past what the stack sustains, requests wait in oha and answers come late: that is how a
      // rate reads "not sustained", a measurement, not a broken promise. The lowest rate (an
      // eighth of Traefik's ceiling) must be carried on any machine the stack runs on, so it and
      // every rate the report calls sustained are held to what was sent and to the answer bound.
      if (run.sustained || run === lowest) {
        checks.push(
          ...timingChecks(run, Math.round(run.offered * endToEnd.plan.seconds), boundMs, lowest),
        );
      }
    }
  }
  if (growth) {
    const { overload } = growth;
    checks.push(drainsCheck("Growth", [growth.small, growth.large]));
    checks.push({
      phase: "Growth",
      rule:
        "overload: every answer 202 or a 503 the API counted as queue_full, with the backlog at QUEUE_MAX_LENGTH",
      measured:
        `${overload.load.accepted} × 202, ${overload.load.rejected} × 503 (the API counted ${overload.refused.full} queue_full, ${overload.refused.unavailable} queue_unavailable, ${overload.refused.unconfirmed} unconfirmed), ${overload.load.failed} other or none; backlog ≤ ${overload.maxBacklog} of ${overload.maxLength}`,
      ok: overload.load.failed === 0 && overload.refused.full === overload.load.rejected &&
        overload.refused.unavailable === 0 && overload.refused.unconfirmed === 0 &&
        (overload.refused.full === 0 || overload.maxBacklog >= overload.maxLength),
    }, {
      phase: "Growth",
      rule: "overload: queue length ≤ QUEUE_MAX_LENGTH",
      measured: `at most ${overload.maxBacklog} of ${overload.maxLength}`,
      ok: overload.maxBacklog <= overload.maxLength,
    });
    checks.push({
      phase: "Growth",
      rule: "overload: stored = accepted",
      measured: `${overload.stored} stored, ${overload.load.accepted} accepted`,
      ok: overload.stored === overload.load.accepted,
    });
  }
  if (bulk) {
    for (const run of [bulk.single, ...bulk.batches]) {
      const name = run.path === "/users"
        ? "POST /users"
        : `POST /users/batch, ${run.usersPerRequest} per request`;
      checks.push({
        phase: "Bulk",
        rule: `${name}: every answer 202 (no fault injected, the bound far above the backlog)`,
        measured: `${
          run.load.requests - run.load.accepted
        } of ${run.load.requests} requests answered otherwise or not at all`,
        ok: run.load.accepted === run.load.requests,
      }, {
        phase: "Bulk",
        rule: `${name}: stored = accepted users`,
        measured: `${run.stored} stored, ${run.acceptedUsers} accepted`,
        ok: run.stored === run.acceptedUsers,
      });
    }
    const open = bulk.open;
    if (open) {
      const boundMs = open.redisTimeoutMs + ANSWER_SLACK_MS;
      // The end-to-end checks' rules, named as this ladder's.
      const bulkCheck = (c: Check): Check => ({
        ...c,
        phase: "Bulk",
        rule: `open model, ${open.usersPerRequest} users per request, ${c.rule}`,
      });
      for (const run of openRuns(open)) {
        const accepted = run.load.accepted * open.usersPerRequest;
        const name = `open model, ${run.offered} req/s of ${open.usersPerRequest} users`;
        checks.push({
          phase: "Bulk",
          rule: `${name}: stored = accepted users`,
          measured: `${run.stored} stored, ${accepted} accepted`,
          ok: run.stored === accepted,
        }, bulkCheck(answersCheck(run, open.queueMaxLength)));
        // As end to end: the lowest rate must be carried, and so must every rate called sustained.
        if (run.sustained || run === open.runs[0]) {
          checks.push(
            ...timingChecks(
              run,
              Math.round(run.offered * bulk.plan.openSeconds),
              boundMs,
              open.runs[0],
            ).map(bulkCheck),
          );
        }
      }
    }
  }
  return checks;
}

/**
 * Below the ceiling: every answer a 202, or a 503 `queue_full` with the backlog at its bound. The
 * benchmark injects no fault, and docs/delivery.md gives the other 503s only for one.
 */
function answersCheck(run: RateRun, queueMaxLength: number): Check {
  const { api, traefik: traefikOwn, unexplained } = run.refusals;
  const queueFull = api.full === 0 || run.maxBacklog >= queueMaxLength;
  return {
    phase: "End to end",
    rule:
      `${run.offered} req/s: every answer 202, or a 503 queue_full with the backlog at QUEUE_MAX_LENGTH (no fault injected)`,
    measured: `${answersMeasured(run)}; backlog ≤ ${run.maxBacklog} of ${queueMaxLength}`,
    ok: run.load.failed === 0 && unexplained === 0 && traefikOwn === 0 &&
      api.unavailable === 0 && api.unconfirmed === 0 && queueFull,
  };
}

/**
 * The slowest answer against `boundMs`; at the ladder's `lowest` rate also what oha sent of the
 * `asked` requests (a rate called sustained sent what was asked by definition).
 */
function timingChecks(run: RateRun, asked: number, boundMs: number, lowest?: RateRun): Check[] {
  const which = run.sustained ? "sustained" : "the lowest rate, which must be sustained";
  return [
    ...(run === lowest
      ? [{
        phase: "End to end",
        rule:
          `${run.offered} req/s (the lowest rate, which must be sustained): requests not sent ≤ ${
            UNSENT_SHARE_MAX * 100
          }% of those asked (more: every oha connection waited on an answer)`,
        // With what the generator and the machine used: whose CPU ran out, if any.
        measured: `${run.load.dropped} of ${asked} not sent; oha used ${
          run.cores.generator.toFixed(2)
        } cores, the machine ${run.cores.machine.toFixed(2)}`,
        ok: run.load.dropped <= UNSENT_SHARE_MAX * asked,
      }]
      : []),
    {
      phase: "End to end",
      rule:
        `${run.offered} req/s (${which}): every answer within REDIS_TIMEOUT_MS + ${ANSWER_SLACK_MS} ms = ${boundMs} ms from its due time (docs/delivery.md: every answer is prompt)`,
      // Rounded with Math.round, which gives NaN rather than throwing for a run recorded before the
      // slowest answer was; NaN holds no bound.
      measured: `slowest ${Math.round(run.load.slowestMs)} ms, p99 ${
        Math.round(run.load.latencyMs.p99)
      } ms`,
      ok: run.load.slowestMs <= boundMs,
    },
  ];
}

/** An end-to-end rate's answers: `7 × 202, 2 × 503 (…by cause…), 0 other or none`. */
function answersMeasured(run: RateRun): string {
  return `${run.load.accepted} × 202, ${run.load.rejected} × 503 (${
    describeRefusals(run.refusals)
  }), ${run.load.failed} other or none`;
}

/** One check over a phase's drains: each stored every user it was given, none dead-lettered. */
function drainsCheck(phase: string, runs: readonly DrainRun[]): Check {
  const short = runs.filter((r) => r.stored !== r.users || r.deadLettered !== 0);
  const users = runs.reduce((sum, r) => sum + r.users, 0);
  return {
    phase,
    rule: "every drain: every user stored, none dead-lettered",
    measured: short.length === 0
      ? `${runs.length} drains, ${users} users stored`
      : short.map((r) =>
        `${drainLabel(r)}: ${r.stored} of ${r.users} stored, ${r.deadLettered} dead-lettered`
      ).join("; "),
    ok: short.length === 0,
  };
}

/** Whether a run passes: it checked something, and every check held. */
export function checksHeld(checks: readonly Check[]): boolean {
  return checks.length > 0 && checks.every((c) => c.ok);
}

/** The last line of a run: how many checks held, or which failed. */
export function checksSummary(checks: readonly Check[]): string {
  const failed = checks.filter((c) => !c.ok);
  if (checks.length === 0) {
    return "FAILED: no check ran (no phase that gives one measured anything), so nothing held";
  }
  return failed.length === 0
    ? `all ${checks.length} checks held`
    : `${failed.length} of ${checks.length} checks FAILED: ${
      failed.map((c) => `${c.phase}: ${c.rule} (${c.measured})`).join("; ")
    }`;
}
