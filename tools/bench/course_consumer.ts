/**
 * The course's own consumer, as its chapter on Redis message queues describes
 * it, for the drain phase's `course` run (the target: our consumer in single
 * mode stores users at least as fast as this): a loop that blocks on
 * BRPOP for one item of the course's list, parses `{ name }` from it and
 * INSERTs that one row into the course's table, then goes round again. One
 * item per round trip each way, no processing list, no acknowledgement, no
 * recovery, no dead letters: an item taken and then lost to a crash is gone,
 * which is what our delivery contract pays to prevent.
 *
 * The course's table (`id serial primary key, name text not null`) is
 * created here at start, since the course's migration is not ours; it has a
 * name of its own so that it never meets our `users`.
 *
 * Reads env: REDIS_URL (default ioredis' own, 127.0.0.1:6379) and the PG*
 * variables postgres.js reads by itself.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";

/** The course's table, under a name of its own in our database. */
export const COURSE_TABLE = "users_course";

/** What the loop needs of Redis (an ioredis client; a fake in tests). */
export interface CourseConsumerRedis {
  brpop(key: string, timeout: number): Promise<[string, string] | null>;
}

/** Inserts one user's name (a postgres.js statement; a fake in tests). */
export type InsertName = (name: string) => Promise<unknown>;

/** The course's schema, under {@linkcode COURSE_TABLE}. */
export async function createCourseTable(sql: postgres.Sql): Promise<void> {
  await sql`create table if not exists ${sql(COURSE_TABLE)} (
    id serial primary key,
    name text not null
  )`;
}

/**
 * Takes one item at a time off the course's list and inserts it, until
 * `running()` says stop. The course blocks forever (timeout 0); it is the
 * same here, and the benchmark stops the process with a signal.
 */
export async function consumeLikeTheCourse(
  redis: CourseConsumerRedis,
  insert: InsertName,
  running: () => boolean = () => true,
): Promise<void> {
  while (running()) {
    const popped = await redis.brpop(COURSE_QUEUE_NAME, 0);
    if (popped === null) continue;
    const { name } = JSON.parse(popped[1]) as { name: string };
    await insert(name);
  }
}

if (import.meta.main) {
  const url = Deno.env.get("REDIS_URL");
  const redis = url === undefined ? new Redis() : new Redis(url);
  // postgres.js reads PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE itself, as in the course.
  const sql = postgres({ onnotice: () => {} });
  await createCourseTable(sql);
  // The course has no shutdown path; a signal ends the process where it is, as it would there.
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => Deno.exit(0));
  }
  console.log(`consuming ${COURSE_QUEUE_NAME} into ${COURSE_TABLE} (the course's consumer)`);
  await consumeLikeTheCourse(
    redis,
    (name) => sql`insert into ${sql(COURSE_TABLE)} (name) values (${name})`,
  );
}
