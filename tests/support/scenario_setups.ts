/**
 * Set-ups and checks several scenarios share: users as the API would queue them, consumers
 * caught holding a batch, the stop-during-an-outage stage, and the drain after it.
 *
 * @module
 */

import assert from "node:assert/strict";
import type postgres from "postgres";
import { v7 as uuidv7 } from "uuid";
import { encodeEnvelope, type UserEnvelope } from "@users-pipeline/queue";
import type { TaskProcess } from "@users-pipeline/harness/processes";
import { waitFor } from "@users-pipeline/harness/wait";
import type { Exit } from "./process_roster.ts";
import { PRODUCTION_DEADLINES } from "./service_env.ts";
import type { Stage } from "./stage.ts";

/** Envelopes as the API would queue them. */
export function envelopes(count: number, prefix: string): UserEnvelope[] {
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: `${prefix}-${i}`,
    enqueued_at: Date.now(),
  }));
}

/** Rows of `users`. */
export async function rowCount(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
  return row?.count ?? 0;
}

/**
 * Waits until `count` of `consumers` hold a batch in their processing list
 * and returns how many items each holds.
 */
export async function waitForHolders(
  stage: Stage,
  consumers: readonly TaskProcess[],
  count: number,
): Promise<number[]> {
  let held: number[] = [];
  await waitFor(() => `${count} consumers to hold a batch (${held.join(", ")})`, async () => {
    held = await Promise.all(consumers.map((consumer) => stage.held(consumer)));
    return held.filter((n) => n > 0).length === count;
  }, { timeoutMs: 20_000 });
  return held;
}

/**
 * The stage of the stop-during-an-outage scenarios: three consumers at the
 * {@linkcode PRODUCTION_DEADLINES}, then 1000 users queued while PostgreSQL
 * is frozen, so two consumers hold a batch of 500 each, their inserts
 * waiting, and the third waits for items. PostgreSQL is left frozen: the
 * caller thaws it (a failed scenario's is thawed by the next one).
 */
export async function twoHoldingOneIdle(stage: Stage, prefix: string) {
  const { consumers, shutdownMs } = await threeConsumers(stage);
  const users = envelopes(1_000, prefix);
  stage.world.pg.server.freeze();
  await stage.world.redis.lpush(stage.keys.queue, ...users.map(encodeEnvelope));
  const held = await waitForHolders(stage, consumers, 2);
  return { consumers, users, held, shutdownMs };
}

/**
 * {@linkcode twoHoldingOneIdle}, but the inserts wait on a lock the test holds on table `users`
 * instead of on a frozen server, so the test sees both inserts arrive (in `pg_stat_activity`)
 * before it goes on: a consumer whose items are in its processing list may not have read the
 * fetch's reply yet, and a stop then gives that fetch up instead of finishing a batch in hand
 * (on a busy machine, a consumer started shortly before its SIGTERM). `unlock` lets the
 * inserts commit.
 */
export async function twoInsertingOneIdle(stage: Stage, prefix: string) {
  const { consumers, shutdownMs } = await threeConsumers(stage);
  const users = envelopes(1_000, prefix);
  const { sql, redis } = stage.world;
  const locker = await sql.reserve();
  await locker`begin`;
  await locker`lock table users in access exclusive mode`;
  const unlock = async () => {
    await locker`commit`;
    locker.release();
  };
  try {
    await redis.lpush(stage.keys.queue, ...users.map(encodeEnvelope));
    const held = await waitForHolders(stage, consumers, 2);
    let waiting = 0;
    await waitFor(() => `2 inserts to wait on the table's lock (${waiting})`, async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where wait_event_type = 'Lock' and query ~ '^\\s*insert into users'`;
      waiting = row!.n;
      return waiting === 2;
    }, { timeoutMs: 20_000 });
    return { consumers, users, held, shutdownMs, unlock };
  } catch (error) {
    await unlock();
    throw error;
  }
}

async function threeConsumers(stage: Stage) {
  const shutdownMs = Number(stage.env(PRODUCTION_DEADLINES).SHUTDOWN_TIMEOUT_MS);
  const env = { ...PRODUCTION_DEADLINES, BATCH_SIZE: "500" };
  const consumers = [
    await stage.consumer(env),
    await stage.consumer(env),
    await stage.consumer(env),
  ];
  return { consumers, shutdownMs };
}

/**
 * Starts a fresh consumer, waits for the queue to drain, and verifies that
 * every one of `users` was stored once: whatever stopped consumers held is
 * recovered once their heartbeats expire.
 */
export async function drainAndVerify(stage: Stage, users: readonly UserEnvelope[]) {
  await stage.consumer();
  const drainMs = await stage.drain();
  const report = await stage.verify([], {
    injected: users.map(({ id, name }) => ({ id, name })),
  });
  return { drainMs, report };
}

/** Fails unless every process exited 0 within its time (see `Stage.sigterm`). */
export function assertCleanExits(stage: Stage, exits: readonly Exit[]): void {
  const bad = exits.filter((exit) => exit.code !== 0);
  assert.deepEqual(
    bad.map(({ name, code }) =>
      `${name}: ${code === undefined ? "still running" : `exit ${code}`}`
    ),
    [],
    `every consumer exits 0 within compose's 30 s after SIGTERM\n${stage.tails(30)}`,
  );
}
