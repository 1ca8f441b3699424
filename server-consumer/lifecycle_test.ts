import assert from "node:assert/strict";
import { EventLog } from "@users-pipeline/runtime/event_log";
import {
  CLOSE_TIMEOUT_MS,
  exitIfStillAlive,
  type LifecycleOptions,
  runLifecycle,
  stopper,
} from "./lifecycle.ts";

/** Options whose every step succeeds, recording the order of what happened. */
function life(overrides: Partial<LifecycleOptions> = {}) {
  const steps: string[] = [];
  const records: Record<string, unknown>[] = [];
  const options: LifecycleOptions = {
    log: new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) }),
    readiness: { starting: (reason) => void steps.push(`starting: ${reason}`) },
    migrate: () => {
      steps.push("migrate");
      return Promise.resolve(true);
    },
    connect: () => {
      steps.push("connect");
      return Promise.resolve(true);
    },
    consumer: {
      id: "c-1",
      stats: { stored: 7, deadLettered: 1, batches: 2, recovered: 3 },
      consume: () => {
        steps.push("consume");
        return Promise.resolve();
      },
    },
    close: (timeoutMs) => {
      steps.push(timeoutMs === CLOSE_TIMEOUT_MS ? "close" : `close in ${timeoutMs} ms`);
      return Promise.resolve();
    },
    ...overrides,
  };
  return { options, steps, records };
}

Deno.test("runLifecycle() migrates, connects, runs, closes and logs stopped with the totals", async () => {
  const { options, steps, records } = life();
  assert.equal(await runLifecycle(options), 0);
  assert.deepEqual(steps, [
    "migrate",
    "starting: connecting to Redis",
    "connect",
    "starting: registering",
    "consume",
    "close",
  ]);
  assert.equal(records.length, 1);
  const { event, consumer_id, stored, dead_lettered, batches, recovered, msg } = records[0]!;
  assert.deepEqual({ event, consumer_id, stored, dead_lettered, batches, recovered }, {
    event: "stopped",
    consumer_id: "c-1",
    stored: 7,
    dead_lettered: 1,
    batches: 2,
    recovered: 3,
  });
  assert.equal(msg, "consumer c-1 stopped: 7 stored, 1 dead-lettered in 2 batches, 3 recovered");
});

Deno.test("runLifecycle() neither connects nor runs once a stop came first, and still closes", async () => {
  for (const stoppedAt of ["migrate", "connect"] as const) {
    const { options, steps, records } = life({
      ...(stoppedAt === "migrate"
        ? { migrate: () => Promise.resolve(false) }
        : { connect: () => Promise.resolve(false) }),
    });
    assert.equal(await runLifecycle(options), 0, stoppedAt);
    assert.ok(!steps.includes("consume"), stoppedAt);
    assert.equal(steps.at(-1), "close", stoppedAt);
    assert.deepEqual(records.map((r) => r.event), ["stopped"], stoppedAt);
  }
});

Deno.test("runLifecycle() exits 1 with migration_failed when the schema cannot be migrated", async () => {
  const { options, steps, records } = life({
    migrate: () => Promise.reject(new Error("permission denied for schema public")),
  });
  assert.equal(await runLifecycle(options), 1);
  assert.ok(!steps.includes("connect") && !steps.includes("consume"));
  assert.equal(steps.at(-1), "close");
  assert.deepEqual(records.map((r) => r.event), ["migration_failed", "stopped"]);
  assert.match(String(records[0]!.msg), /^Cannot start as the schema could not be migrated: perm/);
});

Deno.test("runLifecycle() exits 1 with unexpected_error and its stack when the loop fails, after closing", async () => {
  const { options, steps, records } = life({
    consumer: {
      id: "c-2",
      stats: { stored: 0, deadLettered: 0, batches: 0, recovered: 0 },
      consume: () => Promise.reject(new TypeError("a bug")),
    },
  });
  assert.equal(await runLifecycle(options), 1);
  assert.equal(steps.at(-1), "close");
  assert.deepEqual(records.map((r) => r.event), ["unexpected_error", "stopped"]);
  assert.equal(records[0]!.msg, "consumer loop failed: a bug");
  assert.match(String(records[0]!.stack), /TypeError: a bug/);
});

Deno.test("exitIfStillAlive() logs leaked_handle and exits 1 when the process outlives its grace", async () => {
  const records: Record<string, unknown>[] = [];
  const log = new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) });
  const exited = Promise.withResolvers<number>();
  exitIfStillAlive(log, { graceMs: 10, exit: (code) => exited.resolve(code) });
  // The guard's timer does not keep the process alive: this one does, as a leaked handle would.
  const keepAlive = setTimeout(() => {}, 1_000);
  try {
    assert.equal(await exited.promise, 1);
  } finally {
    clearTimeout(keepAlive);
  }
  assert.equal(records[0]!.event, "leaked_handle");
  assert.equal(records[0]!.msg, "still running 10 ms after closing every client: exiting 1");
});

Deno.test("stopper() drains, says stopping, aborts and stops the loop on the first signal only", () => {
  const calls: string[] = [];
  const records: Record<string, unknown>[] = [];
  const { signal, stop } = stopper({
    log: new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) }),
    readiness: { drain: () => void calls.push("drain") },
    consumer: {
      stop: () => {
        calls.push("stop");
        return Promise.resolve();
      },
    },
  });
  assert.equal(signal.aborted, false);
  stop("SIGTERM");
  stop("SIGTERM");
  stop("SIGINT");
  assert.equal(signal.aborted, true);
  assert.deepEqual(calls, ["drain", "stop"]);
  assert.deepEqual(records.map(({ event, signal, msg }) => ({ event, signal, msg })), [
    {
      event: "stopping",
      signal: "SIGTERM",
      msg: "SIGTERM: not ready; finishing the batch in hand",
    },
  ]);
});
