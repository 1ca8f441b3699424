/**
 * The statements on table `users` (created by `migrations/00001_create_users`),
 * shared by the consumer (batched inserts), the API's status endpoint and
 * the benchmark's direct server, so the SQL for a table lives beside the table.
 *
 * @module
 */

import type postgres from "postgres";
import { z } from "zod";

/**
 * A stored row as the API returns it. A zod schema, so that the API's
 * OpenAPI document (`server/openapi.ts`) describes the very shape the type
 * says; nothing parses rows with it. The dates are `Date`s here and ISO 8601
 * strings once JSON, which is what the document says of them.
 */
export const storedUser = z.object({
  id: z.uuid(),
  name: z.string(),
  enqueued_at: z.date().describe("when the API accepted the user"),
  stored_at: z.date().describe("when the row was committed"),
}).meta({ id: "StoredUser", description: "A user stored in the table." });

/** A stored row as the API returns it (see {@linkcode storedUser}). */
export type StoredUser = Readonly<z.infer<typeof storedUser>>;

/**
 * A user as the table stores it: the queue's envelope has exactly these
 * fields, so the consumer inserts what it fetched as it is.
 */
export interface NewUser {
  /** The primary key, so an insert repeated after a redelivery does nothing. */
  readonly id: string;
  readonly name: string;
  /** When the API accepted the user, in milliseconds since the Unix epoch. */
  readonly enqueued_at: number;
}

/**
 * Inserts the users in one statement, whatever their number: three arrays
 * unnested server-side, so there is no 65,535-parameter limit and the
 * statement text (and its prepared plan) is the same for 2 rows or 5,000; a
 * single user (single mode, the benchmark's direct server) goes as one row of plain
 * parameters, which spares both sides the arrays. Rows whose id is already
 * stored are skipped (redelivery is harmless); resolves to how many rows this
 * statement actually inserted.
 *
 * Why a count and not `returning id`: the ids would cost the server a row
 * each to send and the client a row object each to parse, on every batch,
 * while only a batch that met stored ids needs to know which (the writer then
 * asks for their names: `server-consumer/user_writer.ts`). The bench's drain
 * phase measures the whole insert path against a reference of its own.
 */
export async function insertUsers(
  sql: postgres.Sql,
  users: readonly NewUser[],
): Promise<number> {
  if (users.length === 1) {
    const { id, name, enqueued_at } = users[0]!;
    const result = await sql`
      insert into users (id, name, enqueued_at)
      values (${id}::uuid, ${name}::text, to_timestamp(${enqueued_at}::float8 / 1000.0))
      on conflict (id) do nothing`;
    return result.count;
  }
  const ids = new Array<string>(users.length);
  const names = new Array<string>(users.length);
  const enqueuedAt = new Array<number>(users.length);
  users.forEach((user, i) => {
    ids[i] = user.id;
    names[i] = user.name;
    enqueuedAt[i] = user.enqueued_at;
  });
  const result = await sql`
    insert into users (id, name, enqueued_at)
    select id, name, to_timestamp(ms / 1000.0)
    from unnest(${ids}::uuid[], ${names}::text[], ${enqueuedAt}::float8[]) as t(id, name, ms)
    on conflict (id) do nothing`;
  return result.count;
}

/** The stored names of the given ids (to tell a redelivery from an id clash). */
export async function storedNames(
  sql: postgres.Sql,
  ids: readonly string[],
): Promise<Map<string, string>> {
  const rows = await sql<{ id: string; name: string }[]>`
    select id, name from users where id = any(${ids as string[]}::uuid[])`;
  return new Map(rows.map((row) => [row.id, row.name]));
}

/** One stored user, or undefined when it is not (yet) in the table. */
export async function findUser(sql: postgres.Sql, id: string): Promise<StoredUser | undefined> {
  const [row] = await sql<StoredUser[]>`
    select id, name, enqueued_at, stored_at from users where id = ${id}::uuid`;
  return row;
}

/**
 * The `limit` newest stored users, newest first. "Newest" is by id: the API
 * mints UUIDv7 ids, whose leading bits are the time of acceptance, so the
 * primary-key index answers this with `limit` index steps whatever the table's
 * size (an `order by stored_at` would sort the whole table: it has no index).
 */
export async function listUsers(sql: postgres.Sql, limit: number): Promise<StoredUser[]> {
  return await sql<StoredUser[]>`
    select id, name, enqueued_at, stored_at from users order by id desc limit ${limit}`;
}
