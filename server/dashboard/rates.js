// @ts-check
/**
 * The rates the dashboard and `./stack stats` show, derived from two successive snapshots of
 * the queue. Plain JavaScript so that the browser runs this very file (no build step) and the
 * terminal view imports it: both show the same numbers because they compute them once, here.
 *
 * Every user the API accepted is in exactly one place at any moment (queued, retry, processing,
 * dead) or stored, so the growth of that sum is the ingest rate, whatever the consumers do; the
 * growth of `stored` alone is the rate at which they commit rows.
 *
 * @module
 */

/**
 * What the rates are derived from: one reading of the queue's counters.
 * @typedef {object} Snapshot
 * @property {number} at When it was read, in ms (any clock, as long as both snapshots share it).
 * @property {number} stored Rows acknowledged as stored, all consumers, since the queue began.
 * @property {number} queued
 * @property {number} retry
 * @property {number} processing
 * @property {number} dead
 * @property {Record<string, number>} consumers Rows stored by each live consumer, by its id.
 */

/**
 * Rows per second between two snapshots.
 * @typedef {object} Rates
 * @property {number} ingest Users accepted per second.
 * @property {number} stored Rows stored per second.
 * @property {Record<string, number>} consumers Rows per second of each consumer present in both.
 */

/**
 * The snapshot in an overview (`GET /admin/overview`, `queue/overview.ts`) read at `at`.
 * @param {import("@users-pipeline/queue").Overview} overview
 * @param {number} at
 * @returns {Snapshot}
 */
export function snapshotOf(overview, at) {
  return {
    at,
    stored: overview.stored_total,
    ...overview.depth,
    consumers: Object.fromEntries(overview.consumers.map((c) => [c.id, c.stored])),
  };
}

/** Every user the queue ever accepted: stored, or still somewhere in the queue. */
export function accepted(/** @type {Snapshot} */ snapshot) {
  return snapshot.stored + snapshot.queued + snapshot.retry + snapshot.processing +
    snapshot.dead;
}

/**
 * The rates between `previous` and `current`, or `undefined` when no time passed between them.
 * A rate never goes below 0: purging dead letters shrinks the accepted sum and a consumer's
 * counter restarts when it registers again, and neither is negative traffic.
 * @param {Snapshot} previous
 * @param {Snapshot} current
 * @returns {Rates | undefined}
 */
export function rates(previous, current) {
  const seconds = (current.at - previous.at) / 1000;
  if (!(seconds > 0)) return undefined;
  const perSecond = (/** @type {number} */ delta) => Math.max(0, delta) / seconds;
  /** @type {Record<string, number>} */
  const consumers = {};
  for (const [id, stored] of Object.entries(current.consumers)) {
    const before = previous.consumers[id];
    if (before !== undefined) consumers[id] = perSecond(stored - before);
  }
  return {
    ingest: perSecond(accepted(current) - accepted(previous)),
    stored: perSecond(current.stored - previous.stored),
    consumers,
  };
}

/** A duration in ms the way an operator reads it: `850 ms`, `12.4 s`, `3 min 5 s`. */
export function formatAge(/** @type {number} */ ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 60) return `${minutes} min ${Math.floor((ms % 60_000) / 1000)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** A rate rounded for display: `0`, `4.5`, `1,234`. */
export function formatRate(/** @type {number} */ perSecond) {
  return perSecond < 10
    ? String(Math.round(perSecond * 10) / 10)
    : Math.round(perSecond).toLocaleString("en-US");
}
