/**
 * What fails a benchmark run, quick or full, whatever the machine. The
 * targets (targets.ts) are ratios a busy machine may miss, so they are
 * reported and never fail a run; these checks are facts about what the
 * pipeline answered and kept, which hold on any machine:
 *
 * - every 202 was kept: users queued (ingest: our API and the course's producer,
 *   each on its own list) or stored (ingest's direct
 *   mode, end to end, overload) are at least the 202s counted (wrk stops
 *   counting with requests in flight, so a few more is normal; end to end
 *   and overload count exactly, so there they must be equal);
 * - every answer was expected: 2xx in ingest (its queue bound is far above
 *   what a run sends, so nothing may answer 503); 202 through Traefik in the
 *   traefik phase (oha; our API's and the course's lists hold exactly the 202s
 *   counted); 202 or 503 end to end (oha) and under overload (k6), and a
 *   503 only where the run asks for more than the stack takes (the overload,
 *   a rate that was not sustained);
 * - k6's thresholds held (no request failed: see post_users_k6.js);
 * - the queue never outgrew QUEUE_MAX_LENGTH under overload.
 *
 * The drains check their own table (every user stored, none dead-lettered)
 * and throw otherwise, which fails the run as a phase error.
 *
 * @module
 */

import { INGEST_TARGETS } from "./ingest.ts";
import type { K6Result } from "./k6.ts";
import type { LoadResult } from "./oha.ts";
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

function answers(
  k6: K6Result | LoadResult,
  rejectedExpected: boolean,
): { measured: string; ok: boolean } {
  const crossed = "crossed" in k6 ? k6.crossed ?? [] : [];
  return {
    measured: `${k6.accepted} × 202, ${k6.rejected} × 503, ${k6.failed} other or none${
      crossed.length > 0 ? `; thresholds crossed: ${crossed.join(", ")}` : ""
    }`,
    ok: k6.failed === 0 && crossed.length === 0 && (rejectedExpected || k6.rejected === 0),
  };
}

/** Every check the results allow, in phase order; a phase that did not run has none. */
export function checkResults(results: BenchResults): Check[] {
  const checks: Check[] = [];
  const { ingest, traefik, endToEnd, growth } = results;
  if (ingest) {
    // The course is absent from results written before it was measured.
    const measured = INGEST_TARGETS.flatMap((target) => {
      const runs = ingest.runs[target];
      return runs === undefined ? [] : [{ target, runs }];
    });
    for (const { target, runs } of measured) {
      const requests = runs.reduce((sum, r) => sum + r.requests, 0);
      const non2xx = runs.reduce((sum, r) => sum + r.non2xx, 0);
      const socketErrors = runs.reduce((sum, r) => sum + r.socketErrors, 0);
      checks.push({
        phase: "Ingest",
        rule: `${target}: every answer 2xx (wrk)`,
        measured: `${non2xx} non-2xx and ${socketErrors} socket errors in ${requests} requests`,
        ok: non2xx === 0 && socketErrors === 0,
      });
    }
    for (const { target, runs } of measured) {
      if (target === "reference") continue; // It keeps nothing: its accept does nothing.
      const where = target === "direct" ? "stored" : "queued";
      checks.push({
        phase: "Ingest",
        rule: `${target}: every 202 kept (users ${where} ≥ 2xx counted)`,
        measured: runs.map((r) => `${r.kept} ${where} / ${r.requests - r.non2xx}`).join(", "),
        ok: runs.every((r) => r.kept >= r.requests - r.non2xx),
      });
    }
    // Results written before k6's thresholds were read have no `crossed`: nothing to check.
    const crossed = ingest.k6Check?.crossed;
    if (crossed !== undefined) {
      checks.push({
        phase: "Ingest",
        rule: "k6 check on the reference: k6's thresholds held",
        measured: crossed.length > 0 ? `crossed: ${crossed.join(", ")}` : "none crossed",
        ok: crossed.length === 0,
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
    for (const run of endToEnd.runs) {
      checks.push({
        phase: "End to end",
        rule: `${run.offered} req/s: stored = accepted`,
        measured: `${run.stored} stored, ${run.load.accepted} accepted`,
        ok: run.stored === run.load.accepted,
      }, {
        phase: "End to end",
        rule: `${run.offered} req/s: every answer 202${run.sustained ? "" : " or 503"} (${
          run.sustained ? "sustained: nothing to shed" : "not sustained: 503 sheds load"
        })`,
        ...answers(run.load, !run.sustained),
      });
    }
  }
  if (growth) {
    const { overload } = growth;
    checks.push({
      phase: "Growth",
      rule: "overload: every answer 202 or 503 (queue full)",
      ...answers(overload.k6, true),
    }, {
      phase: "Growth",
      rule: "overload: queue length ≤ QUEUE_MAX_LENGTH",
      measured: `at most ${overload.maxBacklog} of ${overload.maxLength}`,
      ok: overload.maxBacklog <= overload.maxLength,
    });
    if (overload.stored !== undefined) {
      checks.push({
        phase: "Growth",
        rule: "overload: stored = accepted",
        measured: `${overload.stored} stored, ${overload.k6.accepted} accepted`,
        ok: overload.stored === overload.k6.accepted,
      });
    }
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
