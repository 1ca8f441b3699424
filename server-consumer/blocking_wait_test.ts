import assert from "node:assert/strict";
import { ManualClock } from "@users-pipeline/runtime/manual_clock";
import {
  type BlockingConnection,
  MIN_SHARD_WAIT_SECONDS,
  rotatingWait,
  waitForItems,
} from "./blocking_wait.ts";

/** A connection whose BLMOVE answers with `reply` (or never), recording its calls. */
function fakeConnection(reply: Promise<string | null>) {
  const calls: unknown[][] = [];
  const disconnects: (boolean | undefined)[] = [];
  const connection: BlockingConnection = {
    blmove: (...args) => {
      calls.push(args);
      return reply;
    },
    disconnect: (reconnect) => void disconnects.push(reconnect),
  };
  return { connection, calls, disconnects };
}

Deno.test("waitForItems() waits on the main list with a move back to the same end", async () => {
  const { connection, calls } = fakeConnection(Promise.resolve("item"));
  assert.equal(await waitForItems(connection, { queue: "users", timeoutSeconds: 2 }), true);
  assert.deepEqual(calls, [["users", "users", "RIGHT", "RIGHT", 2]]);
});

Deno.test("waitForItems() resolves false when the server-side timeout passed", async () => {
  const { connection } = fakeConnection(Promise.resolve(null));
  assert.equal(await waitForItems(connection, { queue: "users", timeoutSeconds: 2 }), false);
});

Deno.test("waitForItems() reconnects and rejects when no reply comes within the bound", async () => {
  const { connection, disconnects } = fakeConnection(new Promise(() => {}));
  await assert.rejects(
    waitForItems(connection, { queue: "users", timeoutSeconds: 0, graceMs: 10 }),
    { name: "Error", message: /^Cannot wait for items .*none within 10 ms/ },
  );
  assert.deepEqual(disconnects, [true]);
});

Deno.test("waitForItems() allows the server-side timeout and its grace on the clock, not a moment less", async () => {
  const { connection, disconnects } = fakeConnection(new Promise(() => {}));
  const clock = new ManualClock();
  let failure: unknown;
  const waiting = waitForItems(connection, { queue: "users", timeoutSeconds: 2, clock })
    .catch((error) => failure = error);
  await clock.tick(2_999);
  assert.equal(failure, undefined);
  assert.deepEqual(disconnects, []);
  await clock.tick(1);
  await waiting;
  assert.match(String(failure), /none within 3000 ms; reconnecting$/);
  assert.deepEqual(disconnects, [true]);
  assert.equal(clock.pending, 0);
});

Deno.test("waitForItems() passes on a failure of the connection", async () => {
  const { connection } = fakeConnection(Promise.reject(new Error("Connection is closed.")));
  await assert.rejects(
    waitForItems(connection, { queue: "users", timeoutSeconds: 2 }),
    /Connection is closed/,
  );
});

Deno.test("rotatingWait() watches one shard per wait, in turn, for its share of the timeout", async () => {
  const { connection, calls } = fakeConnection(Promise.resolve(null));
  const wait = rotatingWait(connection, ["a", "b", "c"]);
  for (let i = 0; i < 4; i++) await wait(3);
  assert.deepEqual(calls.map(([queue, , , , timeout]) => [queue, timeout]), [
    ["a", 1],
    ["b", 1],
    ["c", 1],
    ["a", 1],
  ]);
});

Deno.test("rotatingWait() waits at least MIN_SHARD_WAIT_SECONDS, and the whole timeout on one shard", async () => {
  const many = fakeConnection(Promise.resolve(null));
  await rotatingWait(many.connection, Array.from({ length: 64 }, (_, i) => `q${i}`))(2);
  assert.equal(many.calls[0]?.[4], MIN_SHARD_WAIT_SECONDS);
  const one = fakeConnection(Promise.resolve("item"));
  assert.equal(await rotatingWait(one.connection, ["users"])(2), true);
  assert.deepEqual(one.calls, [["users", "users", "RIGHT", "RIGHT", 2]]);
});
