/**
 * Writing a batch of users so that one bad row cannot sink its neighbours.
 *
 * The whole batch goes in one statement. If PostgreSQL refuses it for its
 * data (SQLSTATE class 22 "data exception" or 23 "integrity constraint"), the
 * batch is split in halves and each half retried, down to single rows: the
 * good rows are committed and only the rows refused on their own are returned
 * as rejects, with the SQLSTATE. Any other error (connection lost, server
 * shutting down, timeout) is transient: it is thrown so the caller retries
 * the same batch later, which the idempotent insert makes safe.
 *
 * @module
 */

import type { UserEnvelope } from "@users-pipeline/queue";

/** The table operations the writer needs (see `schema/users_table.ts`). */
export interface UserStore {
  /** Inserts the users in one statement, skipping stored ids; resolves to how many it inserted. */
  insert(users: readonly UserEnvelope[]): Promise<number>;
  /** The stored names of these ids. */
  storedNames(ids: readonly string[]): Promise<Map<string, string>>;
}

/** A user the database will never take, and why. */
export interface Rejected {
  readonly index: number;
  readonly reason: string;
  readonly sqlstate?: string;
}

/** The SQLSTATE of a PostgreSQL error, if it is one. */
function sqlstateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** True when the error is about the row's data, so retrying it can never succeed. */
export function isDataError(error: unknown): boolean {
  const sqlstate = sqlstateOf(error);
  return sqlstate !== undefined && (sqlstate.startsWith("22") || sqlstate.startsWith("23"));
}

/**
 * Stores `users` (indexes refer to this array) and returns the rejected ones.
 * A user whose id is already stored under the same name is a redelivery and
 * counts as stored; under another name it is rejected (an id clash).
 */
export async function writeUsers(
  store: UserStore,
  users: readonly UserEnvelope[],
): Promise<Rejected[]> {
  const rejected: Rejected[] = [];
  const indexes = users.map((_, i) => i);
  await writeSlice(store, { users, indexes, rejected });
  return rejected.sort((a, b) => a.index - b.index);
}

/** Writes the users at `indexes`, halving on a data error; the rows refused alone go to `rejected`. */
async function writeSlice(
  store: UserStore,
  { users, indexes, rejected }: {
    users: readonly UserEnvelope[];
    indexes: readonly number[];
    rejected: Rejected[];
  },
): Promise<void> {
  const slice = indexes.map((i) => users[i]!);
  let inserted: number;
  try {
    inserted = await store.insert(slice);
  } catch (error) {
    if (!isDataError(error)) throw error;
    if (indexes.length === 1) {
      rejected.push({
        index: indexes[0]!,
        reason: `database refused the row: ${(error as Error).message}`,
        sqlstate: sqlstateOf(error),
      });
      return;
    }
    const middle = Math.ceil(indexes.length / 2);
    await writeSlice(store, { users, indexes: indexes.slice(0, middle), rejected });
    await writeSlice(store, { users, indexes: indexes.slice(middle), rejected });
    return;
  }
  if (inserted === slice.length) return;
  // Some ids were already there: redeliveries (same name) or clashes (another
  // name, or the same id twice in this batch with different names: the
  // statement stored the first). A row stored just now carries its user's
  // name, like a redelivery, so the stored names tell every case apart.
  const stored = await store.storedNames([...new Set(slice.map((user) => user.id))]);
  for (const i of indexes) {
    const user = users[i]!;
    const name = stored.get(user.id);
    if (name !== user.name) {
      rejected.push({
        index: i,
        reason: name === undefined
          ? "row was neither inserted nor found"
          : "id is already stored with a different name",
      });
    }
  }
}
