/**
 * What fails a benchmark run, quick or full, whatever the machine. The
 * targets (targets.ts) are ratios a busy machine may miss, so they are
 * reported and never fail a run; these checks are facts about what the
 * pipeline answered and kept, which hold on any machine:
 *
 * - every 202 was kept: users queued (ingest: our API and the course's
 *   producer, each on its own list; the traefik phase) or stored (ingest's
 *   direct mode, end to end, overload) are the 202s counted (oha waits for the
 *   requests in flight at the deadline, so it counts every answer; ingest
 *   asks only for at least as many, as the results it keeps were counted by a
 *   generator that did not wait);
 * - every answer was expected: 202 in ingest and through Traefik (their queue
 *   bound is far above what a run sends, so nothing may answer 503); 202 or
 *   a 503 the API counted as `queue_full` under overload; end to end, 202 or a 503 whose cause a record gives
 *   (refusals.ts: Traefik's own, or the API's by its code), and at a rate
 *   below Traefik's ceiling a 503 no record accounts for fails the run —
 *   whether the rate was sustained does not excuse it, since such 503s are
 *   what would make it look unsustained;
 * - the queue never outgrew QUEUE_MAX_LENGTH under overload.
 *
 * The drains check their own table (every user stored, none dead-lettered)
 * and throw otherwise, which fails the run as a phase error.
 *
 * @module
 */

import { ladderRates } from "./end_to_end.ts";
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

/** Every check the results allow, in phase order; a phase that did not run has none. */
export function checkResults(results: BenchResults): Check[] {
  const checks: Check[] = [];
  const { ingest, traefik, endToEnd, growth } = results;
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
        rule: `${target}: every 202 kept (users ${where} ≥ 202s counted)`,
        measured: runs.map((r) => `${r.kept} ${where} / ${r.accepted}`).join(", "),
        ok: runs.every((r) => r.kept >= r.accepted),
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
  if (endToEnd) {
    // The ladder's top rung is the ceiling, rounded as the ladder rounds it.
    const ceilingRate = ladderRates(endToEnd.ceiling, [1])[0]!;
    for (const run of endToEnd.runs) {
      const belowCeiling = run.offered < ceilingRate;
      checks.push({
        phase: "End to end",
        rule: `${run.offered} req/s: stored = accepted`,
        measured: `${run.stored} stored, ${run.load.accepted} accepted`,
        ok: run.stored === run.load.accepted,
      }, {
        phase: "End to end",
        rule: `${run.offered} req/s: every answer 202 or a 503 whose cause is recorded${
          belowCeiling
            ? " (below Traefik's ceiling: an unexplained 503 fails)"
            : " (at the ceiling: unexplained 503s reported)"
        }`,
        measured: `${run.load.accepted} × 202, ${run.load.rejected} × 503 (${
          describeRefusals(run.refusals)
        }), ${run.load.failed} other or none`,
        ok: run.load.failed === 0 &&
          (!belowCeiling || run.refusals.unexplained === 0),
      });
    }
  }
  if (growth) {
    const { overload } = growth;
    checks.push({
      phase: "Growth",
      rule: "overload: every answer 202 or a 503 the API counted as queue_full",
      measured:
        `${overload.load.accepted} × 202, ${overload.load.rejected} × 503 (the API counted ${overload.refused.full} queue_full, ${overload.refused.unavailable} queue_unavailable, ${overload.refused.unconfirmed} unconfirmed), ${overload.load.failed} other or none`,
      ok: overload.load.failed === 0 && overload.refused.full === overload.load.rejected &&
        overload.refused.unavailable === 0 && overload.refused.unconfirmed === 0,
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
  return checks;
}

/** The last line of a run: how many checks held, or which failed. */
export function checksSummary(checks: readonly Check[]): string {
  const failed = checks.filter((c) => !c.ok);
  if (checks.length === 0) return "nothing to check: no ingest, end-to-end or growth phase ran";
  return failed.length === 0
    ? `all ${checks.length} checks held`
    : `${failed.length} of ${checks.length} checks FAILED: ${
      failed.map((c) => `${c.phase}: ${c.rule} (${c.measured})`).join("; ")
    }`;
}
