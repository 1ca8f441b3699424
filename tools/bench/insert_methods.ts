/**
 * Which statement moves a batch of users into table `users` fastest (issue
 * #10): the consumer's `insert … select from unnest(…) on conflict do nothing`
 * against COPY, measured in one run on one fresh PostgreSQL for
 * batches of 100 to 5,000 rows. Each method inserts the same rows in the same
 * batches, one statement after the other on one connection, in rotating order
 * over the rounds; each figure is the median of the rounds, each ratio is
 * against unnest in the same round.
 *
 * The methods:
 * - `unnest`: the consumer's own statement (`schema/users_table.ts`).
 * - `copy`: postgres.js' `COPY users … FROM STDIN` stream as it comes.
 * - `copy, TCP_NODELAY`: the same on a socket with Nagle's algorithm off.
 *   postgres.js sends the copy's data and its end in separate small writes,
 *   and its socket leaves Nagle on: the last write waits for the previous
 *   one's ACK, which the server delays (40 ms on Linux), twice per statement.
 * - `copy staged, TCP_NODELAY`: COPY into a temporary table, then one
 *   `insert … select … on conflict do nothing`: the only way COPY keeps the
 *   consumer's contract (a redelivered row is no error, and the count of rows
 *   actually inserted comes back), since COPY itself has no ON CONFLICT.
 *
 * Why the consumer keeps unnest whatever these figures say of plain COPY:
 * COPY cannot skip a stored id, and a redelivery must not fail its batch; and
 * postgres.js loses an error the server reports after the copy's end was sent
 * (the stream then neither finishes nor errors), so a copy that hits a stored
 * id would hang until the consumer's statement deadline. The variant that
 * keeps the contract, staged, is the one to compare unnest with.
 *
 *   deno run --cached-only -A tools/bench/insert_methods.ts [--quick]
 *
 * @module
 */

import net from "node:net";
import postgres from "postgres";
import { v7 as uuidv7 } from "uuid";
import type { UserEnvelope } from "@users-pipeline/queue";
import { insertUsers } from "@users-pipeline/schema";
import { migrate, startPostgres } from "@users-pipeline/harness/services";
import { formatCount } from "./progress.ts";

/** The methods compared, in the order of the first round. */
export const METHODS = [
  "unnest",
  "unnest, TCP_NODELAY",
  "copy",
  "copy, TCP_NODELAY",
  "copy staged, TCP_NODELAY",
] as const;
export type Method = typeof METHODS[number];

const COPY_ESCAPES: Readonly<Record<string, string>> = {
  "\\": "\\\\",
  "\t": "\\t",
  "\n": "\\n",
  "\r": "\\r",
};

/** One row of COPY's text format: tab-separated, with backslash, tab, LF and CR escaped. */
export function copyLine(user: UserEnvelope): string {
  const name = user.name.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c]!);
  return `${user.id}\t${name}\t${new Date(user.enqueued_at).toISOString()}\n`;
}

/** `users` envelopes with fresh ids, names that need COPY's escaping among them. */
export function sampleUsers(count: number): UserEnvelope[] {
  const now = Date.now();
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: i % 100 === 0 ? `tab\there, back\\slash ${i}` : `user ${i}`,
    enqueued_at: now,
  }));
}

/** A socket with Nagle's algorithm off, connected before postgres.js takes it. */
function noDelaySocket(options: { host: string[]; port: number[] }): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: options.host[0], port: options.port[0]!, noDelay: true });
    socket.once("connect", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** COPY `users` in `sql`'s connection; resolves once the server confirmed it. */
async function copyInto(
  sql: postgres.Sql | postgres.TransactionSql,
  table: string,
  users: readonly UserEnvelope[],
) {
  const stream = await sql.unsafe(`copy ${table} (id, name, enqueued_at) from stdin`).writable();
  await new Promise<void>((resolve, reject) => {
    stream.once("error", reject);
    stream.once("finish", resolve);
    stream.end(users.map(copyLine).join(""));
  });
}

/** Inserts `users` with `method`; returns how many rows were inserted. */
async function insertWith(
  method: Method,
  clients: { plain: postgres.Sql; noDelay: postgres.Sql },
  users: readonly UserEnvelope[],
): Promise<number> {
  switch (method) {
    case "unnest":
      return await insertUsers(clients.plain, users);
    case "unnest, TCP_NODELAY":
      return await insertUsers(clients.noDelay, users);
    case "copy":
      await copyInto(clients.plain, "users", users);
      return users.length;
    case "copy, TCP_NODELAY":
      await copyInto(clients.noDelay, "users", users);
      return users.length;
    case "copy staged, TCP_NODELAY":
      return await clients.noDelay.begin(async (tx) => {
        await tx`create temporary table staged (like users including defaults) on commit drop`;
        await copyInto(tx, "staged", users);
        const result = await tx`
          insert into users (id, name, enqueued_at) select id, name, enqueued_at from staged
          on conflict (id) do nothing`;
        return result.count;
      });
  }
}

/** One method's rows per second over `rows` users in batches of `batch`. */
async function timeMethod(
  method: Method,
  clients: { plain: postgres.Sql; noDelay: postgres.Sql },
  users: readonly UserEnvelope[],
  batch: number,
): Promise<number> {
  await clients.plain`truncate users`;
  const started = performance.now();
  let inserted = 0;
  for (let i = 0; i < users.length; i += batch) {
    inserted += await insertWith(method, clients, users.slice(i, i + batch));
  }
  const seconds = (performance.now() - started) / 1_000;
  const [{ count }] = await clients.plain<
    [{ count: number }]
  >`select count(*)::int as count from users`;
  if (inserted !== users.length || count !== users.length) {
    throw new Error(`${method} stored ${count} of ${users.length} rows (reported ${inserted})`);
  }
  return users.length / seconds;
}

const median = (values: readonly number[]) =>
  [...values].sort((a, b) => a - b)[values.length >> 1]!;

if (import.meta.main) {
  const quick = Deno.args.includes("--quick");
  const rows = quick ? 10_000 : 50_000;
  const rounds = 3;
  const batches = [100, 1_000, 5_000];
  await using pg = await startPostgres();
  await migrate(pg.env);
  const options = {
    host: pg.env.PGHOST,
    port: Number(pg.env.PGPORT),
    user: pg.env.PGUSER,
    password: pg.env.PGPASSWORD,
    database: pg.env.PGDATABASE,
    max: 1,
    onnotice: () => {},
  };
  const clients = {
    plain: postgres(options),
    // `socket` is documented but missing from postgres.js' types.
    noDelay: postgres(
      { ...options, socket: noDelaySocket } as postgres.Options<Record<string, never>>,
    ),
  };
  try {
    const users = sampleUsers(rows);
    console.log(`${formatCount(rows)} rows per run, ${rounds} rounds, methods in rotating order`);
    console.log("| batch | method | rows/s (median) | of unnest (median of rounds) |");
    console.log("| ----: | ------ | --------------: | ---------------------------: |");
    for (const batch of batches) {
      const perMethod = new Map<Method, number[]>(METHODS.map((m) => [m, []]));
      const ratios = new Map<Method, number[]>(METHODS.map((m) => [m, []]));
      for (let round = 0; round < rounds; round++) {
        const order = METHODS.map((_, i) => METHODS[(i + round) % METHODS.length]!);
        const measured = new Map<Method, number>();
        for (const method of order) {
          measured.set(method, await timeMethod(method, clients, users, batch));
        }
        for (const method of METHODS) {
          perMethod.get(method)!.push(measured.get(method)!);
          ratios.get(method)!.push(measured.get(method)! / measured.get("unnest")!);
        }
      }
      for (const method of METHODS) {
        const ratio = median(ratios.get(method)!);
        console.log(
          `| ${formatCount(batch)} | ${method} | ${
            formatCount(Math.round(median(perMethod.get(method)!)))
          } | ${ratio.toFixed(2)}× |`,
        );
      }
    }
  } finally {
    await Promise.all([clients.plain.end(), clients.noDelay.end()]);
  }
}
