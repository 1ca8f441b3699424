import assert from "node:assert/strict";
import type { DeadLetter } from "@users-pipeline/queue";
import type { StoredUser } from "@users-pipeline/schema";
import { IndexUnavailableError, userStatusReader } from "./user_status.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-000000000001";
const ROW: StoredUser = {
  id: ID,
  name: "Ada",
  enqueued_at: new Date(1),
  stored_at: new Date(2),
};

Deno.test("userStatusReader() answers queued from the index without reading the table", async () => {
  const status = userStatusReader({
    indexed: () => Promise.resolve("queued"),
    findUser: () => Promise.reject(new Error("must not be read")),
  });
  assert.deepEqual(await status(ID), { status: "queued", id: ID });
});

Deno.test("userStatusReader() answers dead with the letter's kind, reason and time", async () => {
  const letter: DeadLetter = {
    payload: "{}",
    reason: "database refused the row: boom",
    kind: "database_refused",
    id: ID,
    sqlstate: "23514",
    dead_at: "2025-01-01T00:00:00.000Z",
  };
  const status = userStatusReader({
    indexed: () => Promise.resolve(letter),
    findUser: () => Promise.reject(new Error("must not be read")),
  });
  assert.deepEqual(await status(ID), {
    status: "dead",
    id: ID,
    kind: "database_refused",
    reason: "database refused the row: boom",
    sqlstate: "23514",
    dead_at: "2025-01-01T00:00:00.000Z",
  });
});

Deno.test("userStatusReader() reads the index before the table", async () => {
  const reads: string[] = [];
  const status = userStatusReader({
    indexed: () => (reads.push("index"), Promise.resolve(undefined)),
    findUser: () => (reads.push("table"), Promise.resolve(ROW)),
  });
  assert.deepEqual(await status(ID), { status: "stored", ...ROW });
  assert.deepEqual(reads, ["index", "table"]);
});

Deno.test("userStatusReader() answers undefined for an id in neither", async () => {
  const status = userStatusReader({ findUser: () => Promise.resolve(undefined) });
  assert.equal(await status(ID), undefined);
});

Deno.test("userStatusReader() rejects with IndexUnavailableError when the index cannot be read", async () => {
  const down = new Error("Connection is closed.");
  const status = userStatusReader({
    indexed: () => Promise.reject(down),
    findUser: () => Promise.reject(new Error("must not be read")),
  });
  const error = await status(ID).catch((e) => e);
  assert.ok(error instanceof IndexUnavailableError, String(error));
  assert.equal(error.cause, down);
});

Deno.test("userStatusReader() rejects with the table's own error, so its code can be read", async () => {
  const refused = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
  const status = userStatusReader({
    indexed: () => Promise.resolve(undefined),
    findUser: () => Promise.reject(refused),
  });
  await assert.rejects(status(ID), (error) => error === refused);
});
