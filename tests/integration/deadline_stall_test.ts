/**
 * `withDeadline` and `SharedDeadline` (runtime/deadline.ts) when the process itself stalls past the
 * bound while the answer is already on its way: the answer must win, or the
 * API would answer 503 for a push Redis had done (a user told "not queued"
 * and stored anyway). A real Redis in another process answers while this one
 * is busy.
 *
 * The stall lasts its 250 ms and then until Redis has done the command, as a
 * second client (redis-cli, run synchronously so this process stays stalled)
 * sees: Redis sends a reply in the same turn of its loop that does the
 * command, so the reply is in this process's socket when the stall ends. A
 * Redis that was itself slowed past the stall (a busy disk holding its
 * append-only file write, a starved CPU) would otherwise make the test's
 * premise false and the test fail for a reason that is not the deadline's.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { SharedDeadline, withDeadline } from "@users-pipeline/runtime/deadline";
import { startRedis } from "@users-pipeline/harness/services";

/** Busy-waits `ms`, then until every key exists in Redis (asked without yielding to the event loop). */
function stall(ms: number, port: number, keys: string[]): void {
  const until = performance.now() + ms;
  while (performance.now() < until) { /* a stall: CPU starvation, a long GC */ }
  const exists = new Deno.Command("redis-cli", { args: ["-p", String(port), "EXISTS", ...keys] });
  while (new TextDecoder().decode(exists.outputSync().stdout).trim() !== String(keys.length)) {
    /* Redis has not done every command yet: the process stays stalled */
  }
}

Deno.test("withDeadline() takes a reply that arrived while the process was stalled past the bound", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    await redis.ping();
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i++) {
      const answer = withDeadline(redis.set(`stall:${i}`, "1"), { ms: 100, what: "set the key" })
        .then(() => "reply", (error) => `deadline: ${error.message}`);
      // The command is on the wire; this process now does nothing else for 250 ms and until it is done.
      stall(250, server.port, [`stall:${i}`]);
      outcomes.push(await answer);
    }
    assert.deepEqual(outcomes, Array(10).fill("reply"));
  } finally {
    redis.disconnect();
  }
});

Deno.test("SharedDeadline takes replies that arrived while the process was stalled past the bound", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    await redis.ping();
    const deadline = new SharedDeadline({ ms: 100, what: "set the key" });
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i++) {
      const answers = [0, 1, 2].map((j) =>
        deadline.race(redis.set(`shared:${i}:${j}`, "1"))
          .then(() => "reply", (error) => `deadline: ${error.message}`)
      );
      stall(250, server.port, [0, 1, 2].map((j) => `shared:${i}:${j}`));
      outcomes.push(...await Promise.all(answers));
    }
    assert.deepEqual(outcomes, Array(30).fill("reply"));
  } finally {
    redis.disconnect();
  }
});
