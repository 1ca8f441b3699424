/**
 * The promise a scenario is held to once its queue is drained, on any topology: every request
 * answered 202 is exactly one row of `users` under the id it was given (or, if it can never be
 * stored, one dead letter with the reason); nothing refused is stored, nothing is stored twice,
 * every list of every shard is empty (`delivery_check.ts`); every answer other than 202, the
 * load's and each try of its keyed client alike, is explained by a fault the scenario recorded and
 * comes in time (`answer_check.ts`); no service ended by itself. What a scenario may allow beyond
 * that (a loss window, a push that may have run, crash counts left by a failover) it names in
 * {@linkcode VerifyOptions}, with its reason.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Cluster, Redis } from "ioredis";
import type postgres from "postgres";
import { type DeadLetter, type QueueKeys, shardOf } from "@users-pipeline/queue";
import { type AnswerCheckOptions, QUEUE_UNAVAILABLE, QUEUE_UNCONFIRMED } from "./answer_check.ts";
import {
  checkDelivery,
  deliveryHeld,
  type DeliveryReport,
  describeProblems,
  type Injected,
} from "./delivery_check.ts";
import type { Outcome } from "./fault_load.ts";
import type { RetryingClient } from "./retrying_client.ts";

/**
 * Where a master went on alone before it died, its replicas cut off: without REDIS_WAIT_REPLICAS
 * a 202 its shards gave meanwhile may be lost. docs/scaling.md, "Failover and `REDIS_WAIT_REPLICAS`":
 * "without WAIT a failover can lose users answered 202 in its last moments".
 */
export interface LossWindow {
  /** When the cut began: at or before the replicas' links were dropped (ms since the epoch). */
  readonly from: number;
  /** When the master was killed (ms since the epoch). */
  readonly to: number;
  /** The shards (their index) the master served. */
  readonly shards: ReadonlySet<number>;
}

/** Options of `Stage.verify`. */
export interface VerifyOptions extends AnswerCheckOptions {
  /** Users pushed straight into Redis, expected stored under their id. */
  injected?: readonly Injected[];
  /** Exactly the payloads the dead letters must hold (any order). @default [] */
  deadPayloads?: readonly string[];
  /** Items allowed in the dead letters beyond `deadPayloads`, at most once each. */
  maybeDead?: readonly string[];
  /**
   * Names that may be stored (at most once) or not: pushed straight into
   * Redis, or answered 503 while their push may still have run.
   */
  mayStore?: readonly string[];
  /**
   * Whether every 503 `queue_unavailable` or `unconfirmed` may be stored (once at most), as
   * across a failover, where which push ran cannot be told from the answer's timing. docs/delivery.md,
   * "Nothing refused is queued — with one narrow exception": a 503 queue_unavailable whose push
   * may have run, and a 503 unconfirmed, whose push ran. Whether each fell inside a fault that
   * explains it is still checked. @default false: only the names in `mayStore`
   */
  refusedMayBeStored?: boolean;
  /**
   * Clients that retried every non-202 with their key beside the load (one of
   * single users, one of batches, say): each key's user that got a 202 must be
   * stored exactly once under that id, and no key given up (none may be).
   * Their tries are held to the load's checks, their indeterminate ones
   * counted with the load's against `maxIndeterminate`, and each client must
   * have met a fault (an answer other than 202), or the scenario is
   * inconclusive: a client that only ever got 202s proved nothing about
   * retrying with a key. `Stage.settle` stops them with the load.
   */
  keyed?: RetryingClient | readonly RetryingClient[];
  /**
   * The only 202s that may be missing from the table: those of a request that overlapped the
   * window, for a user of one of its shards (only without REDIS_WAIT_REPLICAS, across a master's
   * failover). Any other lost user fails. @default none may be lost
   */
  mayLose?: LossWindow;
  /**
   * Whether crash counts may be left behind, counted rather than failed, as across a master's
   * failover: consumers whose heartbeats expired while their shard had no master are recovered,
   * which counts a crash against each item they held; a failover can then undo the
   * acknowledgement that clears a count (acknowledgements are not WAITed: a lost one only means
   * a redelivery, harmless under the same id), and a fetch of a recovered item whose WAIT failed
   * is sent again and returns the item as an ordinary one, whose acknowledgement leaves its count
   * (`queue/lua/fetch.lua`). A count left behind is a few bytes, and only matters if that
   * item crashes consumers again. @default false
   */
  crashCountsMayRemain?: boolean;
  /** Prints `<label>: <accounting>` before any check, so the figures are there whatever the verdict. */
  label?: string;
}

/** What one scenario found, for its summary. */
export interface StageReport extends DeliveryReport {
  /** Rows of `users` once drained (each distinct name once; duplicates are in `duplicated`). */
  readonly stored: number;
  /** Answered 503 (Redis unreachable or the write not confirmed): may have been pushed. */
  readonly unconfirmed: number;
  /** Of those, how many were stored. */
  readonly unconfirmedStored: number;
  /** Crash counts left in the shards' `deliveries` hashes once drained. */
  readonly crashCounts: number;
}

/** What the checks read from the stage. */
export interface Verifiable {
  readonly world: { readonly redis: Redis | Cluster; readonly sql: postgres.Sql };
  readonly shards: readonly QueueKeys[];
  lists(): Promise<Map<string, number>>;
  deadLetters(): Promise<DeadLetter[]>;
  assertRunning(): void;
  assertAnswers(outcomes: readonly Outcome[], options?: AnswerCheckOptions): void;
  tails(): string;
}

/** Checks the promise over `stage`'s queue once drained; see the module doc. */
export async function verifyDelivery(
  stage: Verifiable,
  outcomes: readonly Outcome[],
  options: VerifyOptions = {},
): Promise<StageReport> {
  const { sql, redis } = stage.world;
  const rows = await sql<{ id: string; name: string }[]>`select id::text, name from users`;
  const clients = [options.keyed ?? []].flat();
  const keyed = clients.flatMap((client) => client.users);
  const unconfirmed = outcomes.filter(pushMayHaveRun);
  const report = checkDelivery(outcomes, rows, {
    injected: [
      ...options.injected ?? [],
      ...keyed.flatMap(({ name, id }) => id === undefined ? [] : [{ name, id }]),
    ],
    mayStore: [
      ...options.mayStore ?? [],
      ...options.refusedMayBeStored ? unconfirmed.map((o) => o.name) : [],
    ],
  });
  const stored = new Set(rows.map((row) => row.name));
  const left = await Promise.all(
    stage.shards.map((shard) =>
      Promise.all([redis.scard(shard.queuedIds), redis.hlen(shard.deliveries)])
    ),
  );
  const result: StageReport = {
    ...report,
    stored: stored.size,
    unconfirmed: unconfirmed.length,
    unconfirmedStored: unconfirmed.filter((o) => stored.has(o.name)).length,
    crashCounts: left.reduce((sum, [, counts]) => sum + counts, 0),
  };
  if (options.label !== undefined) console.log(`${options.label}: ${accounting(result)}`);

  stage.assertRunning();
  const problems = clients.flatMap((client) => client.settled(rows));
  assert.deepEqual(problems.slice(0, 5), [], `${problems.length} keys not stored exactly once`);
  const { mayLose } = options;
  const byName = new Map(outcomes.map((o) => [o.name, o]));
  const held = mayLose === undefined ? report : {
    ...report,
    lost: report.lost.filter((name) => !inLossWindow(byName.get(name), mayLose, stage.shards)),
  };
  const letters = await stage.deadLetters();
  if (!deliveryHeld(held)) {
    const reasons = new Map<string, number>();
    for (const { reason } of letters) reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
    const buried = [...reasons].map(([reason, n]) => `${n} × ${reason}`).join("; ");
    assert.fail(`${describeProblems(held)}\ndead letters: ${buried || "none"}\n${stage.tails()}`);
  }
  stage.assertAnswers([...outcomes, ...clients.flatMap((client) => client.answers)], options);
  const gaveUp = keyed.filter((user) => user.gaveUp).map((user) => user.name);
  assert.deepEqual(gaveUp.slice(0, 5), [], `${gaveUp.length} keyed users given up without a 202`);
  for (const { answers: tries } of clients) {
    assert.ok(
      tries.some((answer) => answer.kind !== "accepted"),
      `inconclusive: the keyed client met no fault (${tries.length} tries, each a 202)`,
    );
  }

  const { unexplained, missing } = matchDeadLetters(
    letters.map((letter) => letter.payload),
    options.deadPayloads ?? [],
    options.maybeDead ?? [],
  );
  const short = (payloads: string[]) => payloads.map((p) => p.slice(0, 120)).join("\n  ");
  assert.equal(
    unexplained.length + missing.length,
    0,
    `dead letters differ: unexpected:\n  ${short(unexplained)}\nmissing:\n  ${short(missing)}`,
  );
  assert.deepEqual(
    Object.fromEntries(await stage.lists()),
    {},
    "every main, retry and processing list is empty",
  );
  stage.shards.forEach((shard, i) => {
    const [queued, crashCounts] = left[i]!;
    // The status index moves with the items: once every list is empty, no user is still queued.
    assert.equal(queued, 0, `shard ${shard.queue}: users left queued in the status index`);
    if (!options.crashCountsMayRemain) {
      assert.equal(crashCounts, 0, `shard ${shard.queue}: crash counts left behind`);
    }
  });
  return result;
}

/**
 * A 503 whose push may have run: `queue_unavailable` (the push may have run before its answer
 * timed out) or `unconfirmed` (the push ran; WAIT did not confirm it).
 */
export function pushMayHaveRun(outcome: Outcome): boolean {
  return outcome.kind === "rejected" && outcome.status === 503 &&
    (outcome.code === QUEUE_UNCONFIRMED || outcome.code === QUEUE_UNAVAILABLE);
}

/**
 * The dead payloads neither `expected` nor `maybe` accounts for (each accounts for one), and the
 * `expected` ones missing.
 */
export function matchDeadLetters(
  dead: readonly string[],
  expected: readonly string[],
  maybe: readonly string[],
): { unexplained: string[]; missing: string[] } {
  const missing = [...expected];
  const optional = [...maybe];
  const unexplained = dead.filter((payload) => {
    for (const pool of [missing, optional]) {
      const i = pool.indexOf(payload);
      if (i >= 0) {
        pool.splice(i, 1);
        return false;
      }
    }
    return true;
  });
  return { unexplained, missing };
}

/**
 * Whether `outcome` is a 202 the window may lose: its request overlapped the window (a push the
 * master ran alone is answered after the cut and sent before the kill) and its user's shard is
 * one the master served.
 */
export function inLossWindow(
  outcome: Outcome | undefined,
  window: LossWindow,
  shards: readonly QueueKeys[],
): boolean {
  if (outcome?.kind !== "accepted") return false;
  const overlaps = outcome.sentAt <= window.to && outcome.sentAt + outcome.ms >= window.from;
  return overlaps && window.shards.has(shardOf(outcome.id!, shards.length));
}

/**
 * The accounting line a labelled verification prints: `accepted 1200, stored 1200, lost 0,
 * duplicated 0, unconfirmed 35 (12 stored), refused 0, indeterminate 0 (0 stored), crash counts
 * left 0`.
 */
export function accounting(report: StageReport): string {
  return `accepted ${report.accepted}, stored ${report.stored}, lost ${report.lost.length}, ` +
    `duplicated ${report.duplicated.length}, unconfirmed ${report.unconfirmed} ` +
    `(${report.unconfirmedStored} stored), refused ${report.rejected - report.unconfirmed}, ` +
    `indeterminate ${report.indeterminate} (${report.indeterminateStored} stored), ` +
    `crash counts left ${report.crashCounts}`;
}

/**
 * Settles, once drained, every refusal that named an id (a 503 whose push
 * may have run): `GET /users/{id}` on `apiUrl` must say `stored` for an id in
 * the table and 404 for one that is not, as the delivery contract (docs/delivery.md)
 * tells clients to settle it. Returns how many settled each way.
 */
export async function assertSettled(
  sql: postgres.Sql,
  apiUrl: string,
  outcomes: readonly Outcome[],
): Promise<{ stored: number; never: number }> {
  const named = outcomes.filter((o) => o.kind === "rejected" && o.id !== undefined);
  const ids = named.map((o) => o.id!);
  const rows = ids.length === 0 ? [] : await sql<{ id: string }[]>`
    select id::text from users where id in ${sql(ids)}`;
  const inTable = new Set(rows.map((row) => row.id));
  const wrong: string[] = [];
  for (let i = 0; i < ids.length; i += 32) {
    await Promise.all(
      ids.slice(i, i + 32).map(async (id) => {
        const response = await fetch(`${apiUrl}/users/${id}`);
        const body = await response.json().catch(() => undefined);
        const said = response.status === 404
          ? "never queued"
          : `${response.status} ${body?.status}`;
        const expected = inTable.has(id) ? "200 stored" : "never queued";
        if (said !== expected) wrong.push(`${id}: ${said}, the table says ${expected}`);
      }),
    );
  }
  assert.deepEqual(wrong.slice(0, 5), [], `${wrong.length} of ${ids.length} 503s settle wrongly`);
  return { stored: inTable.size, never: ids.length - inTable.size };
}
