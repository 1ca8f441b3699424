import assert from "node:assert/strict";
import { QueueFullError, type UserEnvelope, WriteUnconfirmedError } from "@users-pipeline/queue";
import { systemClock } from "@users-pipeline/runtime/clock";
import { ManualClock } from "@users-pipeline/runtime/manual_clock";
import { GroupedPushes, ShardedPushes } from "./grouped_pushes.ts";

const user = (n: number): UserEnvelope => ({
  id: `0190${String(n).padStart(4, "0")}-0000-7000-8000-000000000000`,
  name: `user ${n}`,
  enqueued_at: n,
});

/** A queue that records each call and fits `room` users in all. */
function fakeQueue(room: number) {
  const calls: { names: string[]; since: number }[] = [];
  return {
    calls,
    enqueueFitting(users: readonly UserEnvelope[], { since }: { since: number }) {
      calls.push({ names: users.map((u) => u.name), since });
      const pushed = Math.max(0, Math.min(room, users.length));
      room -= pushed;
      return Promise.resolve(pushed);
    },
  };
}

/** A schedule the test runs by hand, so a "turn" is exactly what it says. */
function manualTurns() {
  let pending: (() => void) | undefined;
  return {
    schedule: (flush: () => void) => {
      assert.equal(pending, undefined, "one flush per turn");
      pending = flush;
    },
    endTurn: () => {
      const flush = pending;
      pending = undefined;
      flush?.();
    },
  };
}

Deno.test("GroupedPushes sends the users of one turn in one call, in arrival order", async () => {
  const queue = fakeQueue(100);
  const turns = manualTurns();
  let now = 10;
  const pushes = new GroupedPushes(queue, {
    maxLength: 100,
    schedule: turns.schedule,
    clock: { ...systemClock, now: () => now++ },
  });
  const first = [pushes.enqueue(user(1)), pushes.enqueue(user(2)), pushes.enqueue(user(3))];
  turns.endTurn();
  await Promise.all(first);
  const second = pushes.enqueue(user(4));
  turns.endTurn();
  await second;
  assert.deepEqual(queue.calls, [
    { names: ["user 1", "user 2", "user 3"], since: 10 },
    { names: ["user 4"], since: 13 },
  ]);
});

Deno.test("GroupedPushes refuses exactly the users that do not fit, as full", async () => {
  const queue = fakeQueue(2);
  const turns = manualTurns();
  const pushes = new GroupedPushes(queue, { maxLength: 2, schedule: turns.schedule });
  const results = [1, 2, 3, 4].map((n) => pushes.enqueue(user(n)));
  turns.endTurn();
  const settled = await Promise.allSettled(results);
  assert.deepEqual(settled.map((s) => s.status), [
    "fulfilled",
    "fulfilled",
    "rejected",
    "rejected",
  ]);
  for (const s of settled.slice(2)) {
    assert.ok(s.status === "rejected" && s.reason instanceof QueueFullError);
  }
});

Deno.test("GroupedPushes rejects every user of a call that failed", async () => {
  const turns = manualTurns();
  const failure = new Error("Redis is down");
  const pushes = new GroupedPushes({ enqueueFitting: () => Promise.reject(failure) }, {
    maxLength: 10,
    schedule: turns.schedule,
  });
  const results = [pushes.enqueue(user(1)), pushes.enqueue(user(2))];
  turns.endTurn();
  for (const result of results) await assert.rejects(result, (error) => error === failure);
});

Deno.test("GroupedPushes splits a big turn into calls of maxGroup, in order", async () => {
  const queue = fakeQueue(100);
  const turns = manualTurns();
  const pushes = new GroupedPushes(queue, {
    maxLength: 100,
    schedule: turns.schedule,
    maxGroup: 2,
  });
  const results = [1, 2, 3, 4, 5].map((n) => pushes.enqueue(user(n)));
  turns.endTurn();
  await Promise.all(results);
  assert.deepEqual(queue.calls.map((c) => c.names), [
    ["user 1", "user 2"],
    ["user 3", "user 4"],
    ["user 5"],
  ]);
});

Deno.test("GroupedPushes groups the pushes of one real event-loop turn", async () => {
  const queue = fakeQueue(100);
  const pushes = new GroupedPushes(queue, { maxLength: 100 });
  // Three requests whose bodies arrive together: their handlers run in one turn.
  await Promise.all([1, 2, 3].map((n) => Promise.resolve().then(() => pushes.enqueue(user(n)))));
  await pushes.enqueue(user(4));
  assert.deepEqual(queue.calls.map((c) => c.names.length), [3, 1]);
});

Deno.test("GroupedPushes rejects the pushed users of an unconfirmed call as such, the rest as full", async () => {
  const turns = manualTurns();
  const unconfirmed = new WriteUnconfirmedError("push", {
    wanted: 1,
    confirmed: 0,
    timeoutMs: 200,
    pushed: 2,
  });
  const queue = { enqueueFitting: () => Promise.reject(unconfirmed) };
  const pushes = new GroupedPushes(queue, { maxLength: 2, schedule: turns.schedule });
  const waiting = [1, 2, 3].map((n) => pushes.enqueue(user(n)).then(() => "ok", (e) => e));
  turns.endTurn();
  const [a, b, c] = await Promise.all(waiting);
  assert.equal(a, unconfirmed);
  assert.equal(b, unconfirmed);
  assert.ok(c instanceof QueueFullError);
});

Deno.test("ShardedPushes groups per shard: one call per shard per turn, each with its share of the bound", async () => {
  const shards = [fakeQueue(100), fakeQueue(100), fakeQueue(100)];
  const bounds: number[] = [];
  const recording = shards.map((queue) => ({
    enqueueFitting(users: readonly UserEnvelope[], options: { maxLength: number; since: number }) {
      bounds.push(options.maxLength);
      return queue.enqueueFitting(users, options);
    },
  }));
  // Each shard schedules its own flush; the test runs them all as the end of one turn.
  const flushes: (() => void)[] = [];
  const pushes = new ShardedPushes(recording, {
    maxLength: 10,
    shardOf: (id) => Number(id.slice(4, 8)) % 3,
    schedule: (flush) => flushes.push(flush),
  });
  const all = [1, 2, 3, 4, 5, 6, 7].map((n) => pushes.enqueue(user(n)));
  assert.equal(flushes.length, 3, "one flush per shard with users");
  for (const flush of flushes) flush();
  await Promise.all(all);
  assert.deepEqual(shards.map((q) => q.calls.map((c) => c.names)), [
    [["user 3", "user 6"]],
    [["user 1", "user 4", "user 7"]],
    [["user 2", "user 5"]],
  ]);
  assert.deepEqual(bounds, [4, 4, 4], "10 over 3 shards, rounded up");
});

/** A queue whose calls are recorded and answered (all users pushed) only when the test says. */
function answeredByHand() {
  const calls: string[][] = [];
  const replies: (() => void)[] = [];
  const queue = {
    enqueueFitting(users: readonly UserEnvelope[]) {
      calls.push(users.map((u) => u.name));
      return new Promise<number>((resolve) => replies.push(() => resolve(users.length)));
    },
  };
  return { queue, calls, replies };
}

Deno.test("GroupedPushes: one group in flight; whatever arrives meanwhile goes as the next group", async () => {
  const turns = manualTurns();
  const { queue, calls, replies } = answeredByHand();
  const pushes = new GroupedPushes(queue, {
    maxLength: 100,
    schedule: turns.schedule,
    maxWaitMs: 60_000,
  });
  const first = pushes.enqueue(user(1));
  turns.endTurn();
  // Two more turns' users arrive while the first call is in flight: no flush is scheduled.
  const later = [pushes.enqueue(user(2)), pushes.enqueue(user(3))];
  turns.endTurn();
  const last = pushes.enqueue(user(4));
  turns.endTurn();
  assert.deepEqual(calls, [["user 1"]]);
  replies.shift()!();
  await first;
  await new Promise((resolve) => setTimeout(resolve, 0)); // the call's settling sends the next
  assert.deepEqual(calls, [["user 1"], ["user 2", "user 3", "user 4"]]);
  replies.shift()!();
  await Promise.all([...later, last]);
  // Idle again: the next user is scheduled for the end of its turn as usual.
  const again = pushes.enqueue(user(5));
  turns.endTurn();
  replies.shift()!();
  await again;
  assert.deepEqual(calls.at(-1), ["user 5"]);
});

Deno.test("GroupedPushes sends the next group anyway once the call in flight took maxWaitMs", async () => {
  const turns = manualTurns();
  const { queue, calls, replies } = answeredByHand();
  const pushes = new GroupedPushes(queue, {
    maxLength: 100,
    schedule: turns.schedule,
    maxWaitMs: 20,
  });
  const first = pushes.enqueue(user(1));
  turns.endTurn();
  const behind = [pushes.enqueue(user(2)), pushes.enqueue(user(3))];
  assert.deepEqual(calls, [["user 1"]]);
  // The first call stalls: the group behind it goes after 20 ms, not after it.
  await new Promise((resolve) => setTimeout(resolve, 40));
  assert.deepEqual(calls, [["user 1"], ["user 2", "user 3"]]);
  replies.forEach((reply) => reply());
  await Promise.all([first, ...behind]);
});

Deno.test("GroupedPushes waits maxWaitMs behind a call in flight on the clock it is given", async () => {
  const turns = manualTurns();
  const { queue, calls, replies } = answeredByHand();
  const clock = new ManualClock();
  const pushes = new GroupedPushes(queue, { maxLength: 100, schedule: turns.schedule, clock });
  const first = pushes.enqueue(user(1));
  turns.endTurn();
  const behind = pushes.enqueue(user(2));
  await clock.tick(4);
  assert.deepEqual(calls, [["user 1"]]);
  await clock.tick(1);
  assert.deepEqual(calls, [["user 1"], ["user 2"]], "the default maxWaitMs is 5");
  replies.forEach((reply) => reply());
  await Promise.all([first, behind]);
  assert.equal(clock.pending, 0);
});
