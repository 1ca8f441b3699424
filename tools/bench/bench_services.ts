/**
 * The Redis and PostgreSQL the ingest, drain and growth measurements share:
 * started on free loopback ports with the repo's own configuration (the
 * native stack's servers, redis/redis.conf's AOF settings), migrated, with a
 * client of each for the benchmark itself, and the environment our services
 * get to reach them.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { parseEnv } from "@users-pipeline/runtime/config";
import { postgresOptions, postgresVars } from "@users-pipeline/runtime/postgres_options";
import {
  migrate,
  startPostgres,
  startRedis,
  type TestPostgres,
  type TestRedis,
} from "@users-pipeline/harness/services";
import { onInterrupt } from "./interrupt.ts";
import { readTreeCpuSeconds } from "./process_stats.ts";

/** Running servers and the benchmark's clients of them. */
export interface BenchServices extends AsyncDisposable {
  readonly redisServer: TestRedis;
  readonly postgresServer: TestPostgres;
  /** For the benchmark's own commands (preloading, polling depths). */
  readonly redis: Redis;
  /** For the benchmark's own statements (resets, counts, the reference insert). */
  readonly sql: postgres.Sql;
  /** What an API or a consumer needs to reach both, plus `extra`. */
  serviceEnv(extra?: Record<string, string>): Record<string, string>;
  /** Empties table `users` and checkpoints, so no checkpoint of old rows lands in a measurement. */
  resetTable(): Promise<void>;
  /** Rows in table `users`. */
  rowCount(): Promise<number>;
  /** CPU seconds Redis and PostgreSQL (all its processes) have used so far. */
  serverCpuSeconds(): Promise<{ redis: number; postgres: number }>;
  /** Bytes Redis holds for data (INFO memory's `used_memory`). */
  redisUsedMemory(): Promise<number>;
  /** PostgreSQL's current WAL position, in bytes from the start of the WAL. */
  walPosition(): Promise<number>;
  /** Stops both servers and removes their data. */
  close(): Promise<void>;
}

/** Connection options for the benchmark's own PostgreSQL clients. */
export function benchPostgresOptions(env: Readonly<Record<string, string>>, max: number) {
  return {
    ...postgresOptions(parseEnv(postgresVars, { service: "bench", env })),
    max,
    onnotice: () => {},
  };
}

/** Starts Redis and PostgreSQL, migrates, and connects. */
export async function startBenchServices(): Promise<BenchServices> {
  const [redisStart, postgresStart] = await Promise.allSettled([startRedis(), startPostgres()]);
  if (redisStart.status === "rejected" || postgresStart.status === "rejected") {
    // Stop the one that did start before reporting the one that did not.
    await Promise.all(
      [redisStart, postgresStart].map((r) => r.status === "fulfilled" ? r.value.close() : null),
    );
    throw redisStart.status === "rejected"
      ? redisStart.reason
      : (postgresStart as PromiseRejectedResult).reason;
  }
  const [redisServer, postgresServer] = [redisStart.value, postgresStart.value];
  const forgetServers = onInterrupt(() =>
    Promise.all([redisServer.close(), postgresServer.close()])
  );
  try {
    await migrate(postgresServer.env);
  } catch (error) {
    await Promise.all([redisServer.close(), postgresServer.close()]);
    throw error;
  } finally {
    forgetServers();
  }
  const redis = new Redis(redisServer.url, { maxRetriesPerRequest: 1 });
  const sql = postgres(benchPostgresOptions(postgresServer.env, 2));
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      forget();
      redis.disconnect();
      await sql.end({ timeout: 5 });
      await Promise.all([redisServer.close(), postgresServer.close()]);
    })();
  const forget = onInterrupt(close);
  return {
    redisServer,
    postgresServer,
    redis,
    sql,
    serviceEnv: (extra = {}) => ({
      ...postgresServer.env,
      REDIS_URL: redisServer.url,
      ...extra,
    }),
    async resetTable() {
      await sql`truncate users`;
      await sql`checkpoint`;
    },
    async rowCount() {
      const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
      return row?.count ?? 0;
    },
    async serverCpuSeconds() {
      const [redis = 0, postgres = 0] = await readTreeCpuSeconds([
        redisServer.server.pid ?? 0,
        postgresServer.server.pid ?? 0,
      ]);
      return { redis, postgres };
    },
    async redisUsedMemory() {
      return parseUsedMemory(await redis.info("memory"));
    },
    async walPosition() {
      const [row] = await sql<{ bytes: number }[]>`
        select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 as bytes`;
      return row?.bytes ?? 0;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * `used_memory` of an INFO memory text, in bytes.
 *
 * @throws {TypeError} when the text has no such field.
 */
export function parseUsedMemory(info: string): number {
  const match = /^used_memory:(\d+)\r?$/m.exec(info);
  if (!match) {
    throw new TypeError(
      `Cannot read Redis's memory as INFO has no used_memory: current value is ${
        JSON.stringify(info.slice(0, 200))
      }`,
    );
  }
  return Number(match[1]);
}

let queueCounter = 0;

/** A queue name no earlier measurement of this run used. */
export function freshQueueName(prefix: string): string {
  return `bench_${prefix}_${++queueCounter}`;
}
