/**
 * The statements of `schema/users_table.ts` and the writer on top of them
 * against a real PostgreSQL: what `insertUsers` counts for one row (its plain
 * form) and for many (unnest), and how `writeUsers` tells a redelivery from
 * an id clash from that count alone.
 */

import assert from "node:assert/strict";
import { findUser, insertUsers, storedNames } from "@users-pipeline/schema";
import { writeUsers } from "@users-pipeline/consumer/user_writer";
import { migrate, startPostgres } from "@users-pipeline/harness/services";
import { connectPostgres } from "../support/postgres_client.ts";

const user = (n: number, name = `user ${n}`) => ({
  id: `01934d5e-7b7c-7a1e-9c3f-${String(n).padStart(12, "0")}`,
  name,
  enqueued_at: 1_700_000_000_000 + n,
});

Deno.test("insertUsers() counts the rows it inserted, one row or many, and skips stored ids", async () => {
  await using pg = await startPostgres();
  await migrate(pg.env);
  const sql = connectPostgres(pg.env);
  try {
    assert.equal(await insertUsers(sql, [user(1)]), 1, "one row, plain parameters");
    assert.equal(await insertUsers(sql, [user(1)]), 0, "the same row again is skipped");
    assert.equal(await insertUsers(sql, [user(1), user(2), user(3)]), 2, "unnest skips user 1");
    assert.equal(await insertUsers(sql, [user(4), user(4, "twin")]), 1, "the first twin is kept");
    const stored = await findUser(sql, user(1).id);
    assert.equal(stored?.name, "user 1");
    assert.equal(stored?.enqueued_at.getTime(), user(1).enqueued_at, "enqueued_at from ms, 1 row");
    const many = await findUser(sql, user(3).id);
    assert.equal(many?.enqueued_at.getTime(), user(3).enqueued_at, "enqueued_at from ms, unnest");
    assert.deepEqual(
      await storedNames(sql, [user(4).id, user(9).id]),
      new Map([[user(4).id, "user 4"]]),
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
});

Deno.test("writeUsers() on PostgreSQL: a redelivery is stored, a clash and a bad row are rejected", async () => {
  await using pg = await startPostgres();
  await migrate(pg.env);
  const sql = connectPostgres(pg.env);
  const store = {
    insert: (users: Parameters<typeof insertUsers>[1]) => insertUsers(sql, users),
    storedNames: (ids: readonly string[]) => storedNames(sql, ids),
  };
  try {
    assert.deepEqual(await writeUsers(store, [user(1), user(2)]), []);
    // A redelivery of 1, an id clash with 2, a twin of 3 under another name, a name too long.
    const batch = [user(1), user(2, "other"), user(3), user(3, "twin"), user(4, "x".repeat(201))];
    const rejected = await writeUsers(store, batch);
    assert.deepEqual(
      rejected.map(({ index, sqlstate }) => ({ index, sqlstate })),
      [{ index: 1, sqlstate: undefined }, { index: 3, sqlstate: undefined }, {
        index: 4,
        sqlstate: "23514",
      }],
    );
    assert.match(rejected[0]!.reason, /already stored with a different name/);
    const [{ count }] = await sql<[{ count: number }]>`select count(*)::int as count from users`;
    assert.equal(count, 3, "users 1, 2 and 3, each once");
  } finally {
    await sql.end({ timeout: 5 });
  }
});
