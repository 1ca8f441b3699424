/**
 * The fault suite's verdict on one scenario: given every request's outcome
 * (see `fault_load.ts`), the rows of table `users` and the dead letters once
 * the queue is drained, did anything accepted get lost, stored twice, or
 * stored without having been accepted?
 *
 * Names are the key, not ids: every request posts a unique name, and an
 * indeterminate request (connection reset, timeout) has no id the client
 * knows. The primary key already forbids a duplicate id, so a second row with
 * the same name (under another id) is how a duplicate would show.
 *
 * @module
 */

import type { Outcome } from "./fault_load.ts";

/** A row of `users`. */
export interface Row {
  readonly id: string;
  readonly name: string;
}

/** Items a test pushed straight into Redis, as the API would have. */
export interface Injected {
  readonly name: string;
  readonly id: string;
}

/** What {@linkcode checkDelivery} found; every list holds names. */
export interface DeliveryReport {
  readonly requests: number;
  readonly accepted: number;
  readonly rejected: number;
  readonly indeterminate: number;
  /** Indeterminate requests whose user was stored anyway (allowed). */
  readonly indeterminateStored: number;
  /** Names of `mayStore` that were stored (once). */
  readonly mayStoreStored: number;
  /** Answers the promise forbids (a 500, a 503 without Retry-After…). */
  readonly unexpectedAnswers: readonly Outcome[];
  /** Accepted (or injected) but not stored; the dead letters are checked on their own. */
  readonly lost: readonly string[];
  /** Stored more than once. */
  readonly duplicated: readonly string[];
  /** Stored although rejected, or never requested at all. */
  readonly unexpectedRows: readonly string[];
  /** Stored under another id than the 202 gave. */
  readonly wrongIds: readonly string[];
}

/** Compares what the clients were told (and what was injected) with what was stored. */
export function checkDelivery(
  outcomes: readonly Outcome[],
  rows: readonly Row[],
  { injected = [], mayStore = [] }: {
    injected?: readonly Injected[];
    /**
     * Names that may be stored or not (once at most): pushed straight into
     * Redis, or answered 503 while their push may still have run.
     */
    mayStore?: readonly string[];
  } = {},
): DeliveryReport {
  const byName = new Map<string, Outcome>();
  for (const outcome of outcomes) {
    if (byName.has(outcome.name)) {
      throw new TypeError(`Cannot check delivery as name ${outcome.name} was requested twice`);
    }
    byName.set(outcome.name, outcome);
  }
  const expectedId = new Map<string, string>();
  for (const outcome of outcomes) {
    if (outcome.kind === "accepted" && outcome.id) expectedId.set(outcome.name, outcome.id);
  }
  for (const { name, id } of injected) expectedId.set(name, id);

  const storedCount = new Map<string, number>();
  const duplicated: string[] = [];
  const unexpectedRows: string[] = [];
  const wrongIds: string[] = [];
  let indeterminateStored = 0;
  let mayStoreStored = 0;
  const optional = new Set(mayStore);
  for (const row of rows) {
    const times = (storedCount.get(row.name) ?? 0) + 1;
    storedCount.set(row.name, times);
    if (times === 2) duplicated.push(row.name);
    const outcome = byName.get(row.name);
    const id = expectedId.get(row.name);
    if (id !== undefined) {
      if (row.id !== id) wrongIds.push(row.name);
    } else if (outcome?.kind === "indeterminate") {
      if (times === 1) indeterminateStored++;
    } else if (optional.has(row.name)) {
      if (times === 1) mayStoreStored++;
      // A 503 that may have queued its user names the id it minted: stored, it is under that id.
      if (outcome?.id !== undefined && row.id !== outcome.id) wrongIds.push(row.name);
    } else {
      unexpectedRows.push(row.name);
    }
  }
  const lost = [...expectedId.keys()].filter((name) => !storedCount.has(name));
  const count = (kind: Outcome["kind"]) => outcomes.filter((o) => o.kind === kind).length;
  return {
    requests: outcomes.length,
    accepted: count("accepted"),
    rejected: count("rejected"),
    indeterminate: count("indeterminate"),
    indeterminateStored,
    mayStoreStored,
    unexpectedAnswers: outcomes.filter((o) => o.kind === "unexpected"),
    lost,
    duplicated,
    unexpectedRows,
    wrongIds,
  };
}

/** A short, readable account of what went wrong, for assertion messages. */
export function describeProblems(report: DeliveryReport): string {
  const sample = (names: readonly string[]) =>
    names.length === 0 ? "" : ` (e.g. ${names.slice(0, 5).join(", ")})`;
  const lines = [
    `lost ${report.lost.length}${sample(report.lost)}`,
    `duplicated ${report.duplicated.length}${sample(report.duplicated)}`,
    `unexpected rows ${report.unexpectedRows.length}${sample(report.unexpectedRows)}`,
    `stored under another id ${report.wrongIds.length}${sample(report.wrongIds)}`,
    `forbidden answers ${report.unexpectedAnswers.length}${
      sample(report.unexpectedAnswers.map((o) => `${o.name}: ${o.detail}`))
    }`,
  ];
  return lines.join("; ");
}

/** Whether the promise held: nothing lost, doubled, invented or answered wrongly. */
export function deliveryHeld(report: DeliveryReport): boolean {
  return report.lost.length === 0 && report.duplicated.length === 0 &&
    report.unexpectedRows.length === 0 && report.wrongIds.length === 0 &&
    report.unexpectedAnswers.length === 0;
}
