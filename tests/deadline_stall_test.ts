/**
 * `withDeadline` and `SharedDeadline` (queue/deadline.ts) when the process itself stalls past the
 * bound while the answer is already on its way: the answer must win, or the
 * API would answer 503 for a push Redis had done (a user told "not queued"
 * and stored anyway). A real Redis in another process answers while this one
 * is busy.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { SharedDeadline, withDeadline } from "../queue/deadline.ts";
import { startRedis } from "../tools/harness/services.ts";

Deno.test("withDeadline() takes a reply that arrived while the process was stalled past the bound", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    await redis.ping();
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i++) {
      const answer = withDeadline(redis.set(`stall:${i}`, "1"), 100, "set the key")
        .then(() => "reply", (error) => `deadline: ${error.message}`);
      // The command is on the wire; this process now does nothing else for 250 ms.
      const until = performance.now() + 250;
      while (performance.now() < until) { /* a stall: CPU starvation, a long GC */ }
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
    const deadline = new SharedDeadline(100, "set the key");
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i++) {
      const answers = [0, 1, 2].map((j) =>
        deadline.race(redis.set(`shared:${i}:${j}`, "1"))
          .then(() => "reply", (error) => `deadline: ${error.message}`)
      );
      const until = performance.now() + 250;
      while (performance.now() < until) { /* a stall */ }
      outcomes.push(...await Promise.all(answers));
    }
    assert.deepEqual(outcomes, Array(30).fill("reply"));
    assert.equal(deadline.pending, 0);
  } finally {
    redis.disconnect();
  }
});
