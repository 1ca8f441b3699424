import assert from "node:assert/strict";
import type { UserEnvelope } from "@users-pipeline/queue";
import { isDataError, type UserStore, writeUsers } from "./user_writer.ts";

class SqlError extends Error {
  constructor(readonly code: string) {
    super(`sqlstate ${code}`);
  }
}

/**
 * A table in a Map that refuses, like PostgreSQL, a whole statement when any
 * of its rows has a name containing "bad", and counts statements.
 */
function memoryStore(failFirst?: Error) {
  const rows = new Map<string, string>();
  const store: UserStore & { statements: number; rows: Map<string, string> } = {
    statements: 0,
    rows,
    insert(users) {
      store.statements++;
      if (failFirst) {
        const error = failFirst;
        failFirst = undefined;
        return Promise.reject(error);
      }
      if (users.some((u) => u.name.includes("bad"))) return Promise.reject(new SqlError("22021"));
      let inserted = 0;
      for (const u of users) {
        if (!rows.has(u.id)) {
          rows.set(u.id, u.name);
          inserted++;
        }
      }
      return Promise.resolve(inserted);
    },
    storedNames(ids) {
      return Promise.resolve(
        new Map(ids.filter((id) => rows.has(id)).map((id) => [id, rows.get(id)!])),
      );
    },
  };
  return store;
}

const user = (n: number, name = `user ${n}`): UserEnvelope => ({
  id: `00000000-0000-7000-8000-${String(n).padStart(12, "0")}`,
  name,
  enqueued_at: 0,
});

Deno.test("writeUsers() stores a clean batch in one statement", async () => {
  const store = memoryStore();
  const rejected = await writeUsers(store, Array.from({ length: 1000 }, (_, i) => user(i)));
  assert.deepEqual(rejected, []);
  assert.equal(store.statements, 1);
  assert.equal(store.rows.size, 1000);
});

Deno.test("writeUsers() commits 999 good rows and rejects the one bad row", async () => {
  const store = memoryStore();
  const users = Array.from({ length: 1000 }, (_, i) => user(i, i === 617 ? "bad" : `user ${i}`));
  const rejected = await writeUsers(store, users);
  assert.equal(rejected.length, 1);
  assert.equal(rejected[0]?.index, 617);
  assert.equal(rejected[0]?.sqlstate, "22021");
  assert.equal(store.rows.size, 999);
  // Halving isolates one bad row in about 2·log2(1000) statements, not 1000.
  assert.ok(store.statements <= 21, `${store.statements} statements`);
});

Deno.test("writeUsers() treats a redelivery as stored and an id clash as rejected", async () => {
  const store = memoryStore();
  await writeUsers(store, [user(1), user(2)]);
  const rejected = await writeUsers(store, [user(1), user(2, "someone else"), user(3)]);
  assert.deepEqual(rejected.map((r) => r.index), [1]);
  assert.match(rejected[0]!.reason, /different name/);
  assert.equal(store.rows.get(user(2).id), "user 2");
});

Deno.test("writeUsers() rejects the second of two same-id items with different names in one batch", async () => {
  const store = memoryStore();
  const rejected = await writeUsers(store, [user(7, "first"), user(8), user(7, "second")]);
  assert.deepEqual(rejected.map((r) => r.index), [2]);
  assert.equal(store.rows.get(user(7).id), "first");
});

Deno.test("writeUsers() lets a transient error through untouched", async () => {
  const lost = Object.assign(new Error("connection closed"), { code: "CONNECTION_CLOSED" });
  const store = memoryStore(lost);
  await assert.rejects(writeUsers(store, [user(1)]), lost);
  assert.equal(store.rows.size, 0);
});

Deno.test("isDataError() accepts SQLSTATE classes 22 and 23 only", () => {
  assert.ok(isDataError(new SqlError("22001")));
  assert.ok(isDataError(new SqlError("23514")));
  assert.ok(!isDataError(new SqlError("57P01")));
  assert.ok(!isDataError(new SqlError("08006")));
  assert.ok(!isDataError(Object.assign(new Error("x"), { code: "ECONNREFUSED" })));
  assert.ok(!isDataError(new Error("no code")));
});
