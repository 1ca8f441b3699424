/**
 * One load test at a time on this machine. `./stack test` runs the Docker
 * tests beside the others to halve the suite's time, and that is fine while
 * one side builds images or runs unit tests; but when a Swarm rolling update
 * under k6 load and a fault scenario at 2,500 requests a second ran at once,
 * the two cores were starved: API pushes outlived REDIS_TIMEOUT_MS and were
 * answered 503 (some stored anyway, their reply too late), and k6 requests
 * timed out. Those tests then measure the machine, not the pipeline.
 *
 * So a test that drives load runs inside {@linkcode withLoadTurn}: an
 * exclusive lock on a file in the OS temp directory, which the other
 * `deno test` process (or another checkout's suite on the same machine) waits
 * for. It is taken by the test as a whole, not around the load generator
 * alone, because such a test times its faults from the start of its load.
 * The Docker test files hold it from their first test to their last
 * ({@linkcode takeLoadTurn}): besides their loads, starting engines, images
 * and a dozen containers starves a fault scenario just as well (its pushes
 * outlive a 500 ms REDIS_TIMEOUT_MS beside a three-engine Swarm deploy). The
 * fault scenarios and the Redis Cluster scenarios (`tests/support/scenario.ts`)
 * take it per test; the dashboard's and
 * the native stack's test files hold it whole, like the Docker ones. Within
 * one process the turn is shared: turns may nest.
 *
 * @module
 */

import { tmpdir } from "node:os";
import { join } from "node:path";

/** The lock file every checkout's tests on this machine share. */
export const LOAD_TURN_FILE = join(tmpdir(), "users-pipeline-load-turn.lock");

/** A wait for the turn longer than this is reported on stderr. */
const REPORT_WAIT_MS = 1_000;

let holders = 0;
let locked: Promise<Deno.FsFile> | undefined;

async function lockFile(path: string): Promise<Deno.FsFile> {
  const file = await Deno.open(path, { create: true, write: true });
  try {
    await file.lock(true);
  } catch (error) {
    file.close();
    throw error;
  }
  return file;
}

/**
 * Resolves once no other process holds the load turn, to the function that
 * gives it back (call it once). `what` names the test in the line printed
 * when the wait was long.
 */
export async function takeLoadTurn(
  what: string,
  path: string = LOAD_TURN_FILE,
): Promise<() => void> {
  const started = Date.now();
  holders++;
  try {
    locked ??= lockFile(path);
    await locked;
  } catch (error) {
    release();
    throw error;
  }
  const waited = Date.now() - started;
  if (waited > REPORT_WAIT_MS) {
    console.error(
      `load turn: "${what}" waited ${(waited / 1_000).toFixed(1)} s for another test's load`,
    );
  }
  let given = false;
  return () => {
    if (given) return;
    given = true;
    release();
  };
}

/**
 * Holds the load turn from the first test of the calling test file to its
 * last (`Deno.test.beforeAll` and `afterAll`): for a file whose tests all load
 * the machine. Call it once, at the file's top level.
 */
export function holdLoadTurnForFile(what: string): void {
  let giveBack: (() => void) | undefined;
  Deno.test.beforeAll(async () => {
    giveBack = await takeLoadTurn(what);
  });
  Deno.test.afterAll(() => giveBack?.());
}

/** Runs `fn` holding the load turn ({@linkcode takeLoadTurn}) until it settles. */
export async function withLoadTurn<T>(
  what: string,
  fn: () => Promise<T>,
  path: string = LOAD_TURN_FILE,
): Promise<T> {
  const giveBack = await takeLoadTurn(what, path);
  try {
    return await fn();
  } finally {
    giveBack();
  }
}

function release(): void {
  if (--holders > 0) return;
  const file = locked;
  locked = undefined;
  // Closing the file releases the lock; nothing here waits on anything else.
  file?.then((f) => f.close(), () => {});
}
