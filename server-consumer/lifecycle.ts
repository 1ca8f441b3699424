/**
 * The consumer process's life, once its parts are built: bring the schema up
 * to date, wait for both Redis connections, run the loop until it is told to
 * stop, then close every client whatever happened, say how it ended, and make
 * sure the process does end. A stop signal makes it not ready at once, ends
 * the start's waits and has the loop finish or hand back the batch in hand.
 *
 * It logs `stopping` on the first signal, `migration_failed` or
 * `unexpected_error` (exit code 1) when a step failed, `stopped` with the
 * totals as its last line, and `leaked_handle` (exit 1) if anything still
 * keeps the process alive after everything was closed.
 *
 * @module
 */

import { errorText, type EventLog } from "@users-pipeline/runtime/event_log";
import type { Readiness } from "@users-pipeline/runtime/readiness";
import type { Consumer } from "./consumer.ts";

/**
 * How long the process may take to exit once everything is closed. The runtime
 * itself can take about 2 s after a PostgreSQL connection was used, more on a
 * busy machine; 5 s leaves room for that and still exits, in the worst case
 * measured (25 s after SIGTERM during an outage), inside compose's 30 s.
 */
export const LEAK_GRACE_MS = 5_000;

/**
 * How long closing the clients may take once the loop has ended (nothing is
 * in flight then): a live server answers in milliseconds; a frozen one is
 * abandoned after this, so a stop ends within SHUTDOWN_TIMEOUT_MS +
 * HAND_BACK_TIMEOUT_MS + 1 s, well inside compose's 30 s.
 */
export const CLOSE_TIMEOUT_MS = 1_000;

/** Options of {@linkcode stopper}. */
export interface StopperOptions {
  readonly log: EventLog;
  readonly readiness: Pick<Readiness, "drain">;
  readonly consumer: Pick<Consumer, "stop">;
}

/** A process's stop: its signal for the waits it ends, and what a stop signal calls. */
export interface Stopper {
  /** Aborts on the first stop. */
  readonly signal: AbortSignal;
  /**
   * Not ready from now on, a `stopping` record, {@linkcode signal} aborted,
   * and the loop told to stop. A second call (a second signal) does nothing.
   */
  stop(signal: Deno.Signal): void;
}

/** The stop of a process whose parts are `options`. */
export function stopper(options: StopperOptions): Stopper {
  const { log, readiness, consumer } = options;
  const stopping = new AbortController();
  return {
    signal: stopping.signal,
    stop: (signal) => {
      if (stopping.signal.aborted) return;
      readiness.drain();
      log.info("stopping", { signal, msg: `${signal}: not ready; finishing the batch in hand` });
      stopping.abort();
      void consumer.stop();
    },
  };
}

/** Options of {@linkcode runLifecycle}. */
export interface LifecycleOptions {
  readonly log: EventLog;
  /** Told which step of the start the process is in. */
  readonly readiness: Pick<Readiness, "starting">;
  /**
   * Brings the schema up to date: true once it is, false when a stop came
   * first; rejects when it cannot be.
   */
  readonly migrate: () => Promise<boolean>;
  /** Waits for the Redis connections: true once they are up, false when a stop came first. */
  readonly connect: () => Promise<boolean>;
  readonly consumer: Pick<Consumer, "consume" | "id" | "stats">;
  /**
   * Closes every client within `timeoutMs` ({@linkcode CLOSE_TIMEOUT_MS});
   * called once, when the loop has ended or will not start.
   */
  readonly close: (timeoutMs: number) => Promise<void>;
}

/** Runs the steps in turn, closes everything, logs how it went; resolves with the exit code. */
export async function runLifecycle(options: LifecycleOptions): Promise<number> {
  const { log, readiness, migrate, connect, consumer, close } = options;
  let failure: unknown;
  let migrationFailure: unknown;
  try {
    let migrated = false;
    try {
      migrated = await migrate();
    } catch (error) {
      migrationFailure = error;
    }
    readiness.starting("connecting to Redis");
    // Without an offline queue, commands sent before the first connection would
    // fail; start the loop once both connections are up (or stop if asked to first).
    const connected = migrated && await connect();
    readiness.starting("registering");
    if (connected) await consumer.consume();
  } catch (error) {
    failure = error;
  } finally {
    await close(CLOSE_TIMEOUT_MS);
  }

  let code = 0;
  if (migrationFailure !== undefined) {
    log.error("migration_failed", {
      error: migrationFailure,
      msg: `Cannot start as the schema could not be migrated: ${errorText(migrationFailure)}`,
    });
    code = 1;
  }
  if (failure !== undefined) {
    log.error("unexpected_error", {
      error: failure,
      stack: failure instanceof Error ? failure.stack : undefined,
      msg: `consumer loop failed: ${errorText(failure)}`,
    });
    code = 1;
  }
  const { stored, deadLettered, batches, recovered } = consumer.stats;
  log.info("stopped", {
    consumer_id: consumer.id,
    stored,
    dead_lettered: deadLettered,
    batches,
    recovered,
    msg: `consumer ${consumer.id} stopped: ${stored} stored, ${deadLettered} dead-lettered ` +
      `in ${batches} batches, ${recovered} recovered`,
  });
  return code;
}

/** Options of {@linkcode exitIfStillAlive}. */
export interface LeakGuardOptions {
  /** @default {@linkcode LEAK_GRACE_MS} */
  readonly graceMs?: number;
  /** Ends the process. @default Deno.exit */
  readonly exit?: (code: number) => void;
}

/**
 * Once everything is closed, the process exits by itself unless a handle is
 * still open (a socket postgres.js revived, say). The timer this sets does
 * not keep the process alive; it only fires if something else does, and then
 * logs `leaked_handle` and exits 1.
 */
export function exitIfStillAlive(log: EventLog, options: LeakGuardOptions = {}): void {
  const { graceMs = LEAK_GRACE_MS, exit = Deno.exit } = options;
  const guard = setTimeout(() => {
    log.error("leaked_handle", {
      ms: graceMs,
      msg: `still running ${graceMs} ms after closing every client: exiting 1`,
    });
    exit(1);
  }, graceMs);
  Deno.unrefTimer(guard);
}
