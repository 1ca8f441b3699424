/**
 * The phrases scenarios build their summary line from: what the clients were told, what the
 * delivery check found, how processes ended, durations.
 *
 * @module
 */

import type { DeliveryReport } from "./delivery_check.ts";
import type { Outcome } from "./fault_load.ts";
import type { Exit } from "./process_roster.ts";
import type { RetryingClient } from "./retrying_client.ts";

/** How each consumer ended, e.g. `consumer-1 (500 in hand) exit 0 after 22.3 s`. */
export function describeExits(exits: readonly Exit[], held: readonly number[]): string {
  return exits.map((exit, i) =>
    `${exit.name} (${held[i] ? `${held[i]} in hand` : "idle"}) exit ${exit.code} after ` +
    seconds(exit.ms)
  ).join(", ");
}

/**
 * What a retrying client's users cost and got, for a scenario's summary: how many of its tries met
 * the fault (an answer other than 202), by status and code, `cut` or `no answer`.
 */
export function keyedSummary(
  client: Pick<RetryingClient, "users" | "tries" | "answers">,
): string {
  const done = client.users.filter((user) => user.id !== undefined).length;
  const met = new Map<string, number>();
  for (const answer of client.answers) {
    if (answer.kind === "accepted") continue;
    const what = answer.kind === "indeterminate"
      ? answer.timedOut ? "no answer" : "cut"
      : `${answer.status} ${answer.code ?? "(no code)"}`;
    met.set(what, (met.get(what) ?? 0) + 1);
  }
  const count = [...met.values()].reduce((a, b) => a + b, 0);
  const kinds = [...met].map(([what, n]) => `${n} × ${what}`).join(", ");
  return `keyed client: ${done} of ${client.users.length} keys 202 after ${client.tries} tries, ` +
    `${count} of them met the fault${
      count > 0 ? ` (${kinds})` : ""
    }, each stored once under its id`;
}

/** `accepted, refused, indeterminate` as a phrase. */
export function answers(report: DeliveryReport): string {
  const parts = [`${report.accepted} accepted`];
  if (report.rejected > 0) parts.push(`${report.rejected} refused`);
  if (report.indeterminate > 0) {
    parts.push(`${report.indeterminate} indeterminate (${report.indeterminateStored} stored)`);
  }
  return parts.join(", ");
}

/** What the delivery check found, as a phrase. */
export function verdict(report: DeliveryReport): string {
  return `lost ${report.lost.length}, dup ${report.duplicated.length}, ` +
    `unexpected rows ${report.unexpectedRows.length}`;
}

/** The refusals by status and reason, e.g. `503 queue is full × 1000`. */
export function refusals(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) {
    if (o.kind !== "rejected") continue;
    const key = `${o.status} ${o.detail}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([key, n]) => `${key} × ${n}`).join("; ") || "none refused";
}

/** `ms` as seconds with one decimal: `1.5 s`. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** The mean of `values`, 0 for none. */
export function avg(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}

/** What `o` was answered: `202`, `503 unconfirmed`, `no answer` or `cut`. */
export function answerOf(o: Outcome): string {
  return o.status === undefined
    ? (o.timedOut ? "no answer" : "cut")
    : `${o.status}${o.code === undefined ? "" : ` ${o.code}`}`;
}

/** How many of `outcomes` got each answer: `202 × 900, 503 unconfirmed × 300`. */
export function answerCounts(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) counts.set(answerOf(o), (counts.get(answerOf(o)) ?? 0) + 1);
  return [...counts].map(([answer, n]) => `${answer} × ${n}`).join(", ") || "none";
}

/** What a batch client's users were told: `batches: 1200 users, 202 × 1100, cut × 25`. */
export function batchesSummary(outcomes: readonly Outcome[], what: string): string {
  return `${what}: ${outcomes.length} users, ${answerCounts(outcomes)}`;
}
