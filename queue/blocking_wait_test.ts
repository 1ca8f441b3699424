import assert from "node:assert/strict";
import { type BlockingConnection, waitForItems } from "./blocking_wait.ts";

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

Deno.test("waitForItems() passes on a failure of the connection", async () => {
  const { connection } = fakeConnection(Promise.reject(new Error("Connection is closed.")));
  await assert.rejects(
    waitForItems(connection, { queue: "users", timeoutSeconds: 2 }),
    /Connection is closed/,
  );
});
