/**
 * The course's design end to end, beside the stack's own end-to-end ladder
 * (end_to_end.ts) and on the same Redis and PostgreSQL: the course's
 * producer (course_producer.ts, one replica as in the course) behind a
 * Traefik configured as the stack's (traefik_front.ts), and the course's
 * consumer (course_consumer.ts: BRPOP one item, INSERT it), loaded by oha at
 * the same open-model rates as the stack, for the same time each. Without
 * it, the course is measured only as ingest and as drain apart, and a
 * design whose parts are each fast may still not keep up as a whole.
 *
 * Per rate: accepted/s, stored/s (rows in the course's table when oha ends,
 * over the run: the table has no enqueue time to draw a window from), the
 * largest backlog, CPU per part, and stored against accepted once the list
 * is empty. The course's design can lose a user by design (an item taken and
 * then lost to a crash is gone), so stored = accepted is reported here and
 * never enforced: the benchmark crashes nothing, so a gap would be the
 * design's and is shown as measured.
 *
 * The ladder stops at the first rate the course's design does not sustain:
 * under an open model every rate above it is not sustained either, and each
 * one would build a backlog its one-at-a-time consumer takes minutes to
 * empty.
 *
 * @module
 */

import type { Redis } from "ioredis";
import type postgres from "postgres";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { COURSE_TABLE } from "./course_consumer.ts";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";
import {
  COURSE_CONSUMER_COMMAND,
  COURSE_PRODUCER_COMMAND,
  startApi,
  startDenoProcess,
} from "./deno_task.ts";
import {
  type CpuPart,
  isSustained,
  openConnections,
  type PartPids,
  readPartsCpu,
} from "./end_to_end.ts";
import { type LoadResult, runOha } from "./oha.ts";
import { formatCount, type Progress } from "./progress.ts";
import { startTraefikFront } from "./traefik_front.ts";

/** One rate's measurement of the course's design. */
export interface CourseRateRun {
  /** The request rate asked of the load generator. */
  readonly offered: number;
  readonly load: LoadResult;
  /** 202s per second over the run. */
  readonly acceptedPerSecond: number;
  /** Rows in the course's table when the load ended, per second of the run. */
  readonly storedPerSecond: number;
  /** The longest the list got during the run. */
  readonly maxBacklog: number;
  /** Rows stored once the list was empty, against 202s answered (reported, not enforced). */
  readonly stored: number;
  /** CPU used during the run by each part, in cores. */
  readonly cores: Readonly<Record<CpuPart, number>>;
  readonly sustained: boolean;
}

/** Everything the course's end-to-end ladder measured. */
export interface CourseEndToEndResult {
  /** Producer replicas and consumers: the course runs one of each. */
  readonly producers: 1;
  readonly consumers: 1;
  /** The rates run, lowest first; the last is the first not sustained, if any was not. */
  readonly runs: readonly CourseRateRun[];
  /** The highest rate sustained, or 0. */
  readonly maxSustained: number;
}

/** The stack's servers the course's design shares. */
export interface SharedServers {
  /** The environment our services get: REDIS_URL and the PG* variables. */
  readonly env: Readonly<Record<string, string>>;
  readonly redis: Redis;
  readonly sql: postgres.Sql;
  readonly redisPid: number | undefined;
  readonly postgresPid: number | undefined;
}

/**
 * The highest sustained rate of our ladder over the course's, when the
 * course's ladder found where the course stops keeping up; undefined when
 * the course's design sustained every rate run (its limit lies above the
 * ladder, so no ratio can be read from it).
 */
export function courseEndToEndRatio(
  oursMaxSustained: number,
  course: CourseEndToEndResult,
): number | undefined {
  if (course.runs.every((r) => r.sustained)) return undefined;
  return course.maxSustained === 0
    ? Number.POSITIVE_INFINITY
    : oursMaxSustained / course.maxSustained;
}

/** Runs the course's design at `rates` (lowest first) for `seconds` each. */
export async function runCourseEndToEnd(
  shared: SharedServers,
  rates: readonly number[],
  seconds: number,
  progress: Progress,
): Promise<CourseEndToEndResult> {
  const { redis, sql } = shared;
  const env = { ...shared.env };
  const producer = await startApi("course-producer", COURSE_PRODUCER_COMMAND, { env });
  const consumer = startDenoProcess("course-consumer", COURSE_CONSUMER_COMMAND, { env });
  try {
    await using front = await startTraefikFront("course-e2e", [producer.url]);
    // The consumer creates its table when it starts.
    await waitFor("the course's consumer to create its table", async () => {
      if (!consumer.process.running) {
        throw new Error(`${consumer.name} exited at start:\n${consumer.output.tail(20)}`);
      }
      const [row] = await sql<{ table: string | null }[]>`
        select to_regclass(${COURSE_TABLE})::text as table`;
      return row?.table != null;
    }, { timeoutMs: 60_000 });
    const table = sql(COURSE_TABLE);
    const rows = async () => {
      const [row] = await sql<{ count: number }[]>`select count(*)::int as count from ${table}`;
      return row?.count ?? 0;
    };
    const groups: PartPids[] = [
      ["traefik", [front.pid]],
      ["api", [producer.pid]],
      ["consumers", [consumer.pid]],
      ["redis", [shared.redisPid]],
      ["postgres", [shared.postgresPid]],
    ];
    const runs: CourseRateRun[] = [];
    for (const offered of rates) {
      await redis.del(COURSE_QUEUE_NAME);
      await sql`truncate ${table} restart identity`;
      const cpuBefore = await readPartsCpu(groups);
      let maxBacklog = 0;
      let polling = true;
      const poller = (async () => {
        while (polling) {
          maxBacklog = Math.max(maxBacklog, await redis.llen(COURSE_QUEUE_NAME));
          await delay(100);
        }
      })();
      let load: LoadResult;
      try {
        load = await runOha(`${front.url}/users`, {
          rate: offered,
          seconds,
          connections: openConnections(offered),
        });
      } finally {
        polling = false;
        await poller;
      }
      const [cpuAfter, storedInRun] = await Promise.all([readPartsCpu(groups), rows()]);
      // One item at most is in the consumer's hands once the list is empty; a count that holds
      // still for a moment after that is the end of the drain.
      let last = -1;
      await waitFor("the course's backlog to be stored", async () => {
        if ((await redis.llen(COURSE_QUEUE_NAME)) > 0) return false;
        const now = await rows();
        const settled = now === last;
        last = now;
        return settled;
      }, { intervalMs: 200, timeoutMs: 600_000 });
      const cores = Object.fromEntries(
        Object.entries(cpuAfter).map(([part, s]) => [
          part,
          (s - cpuBefore[part as keyof typeof cpuBefore]) / load.seconds,
        ]),
      ) as Record<Exclude<CpuPart, "generator">, number>;
      const partial = {
        offered,
        load,
        acceptedPerSecond: load.accepted / seconds,
        storedPerSecond: storedInRun / seconds,
        maxBacklog,
        stored: last,
        cores: { ...cores, generator: (load.cpuSeconds ?? 0) / load.seconds },
      };
      const run = { ...partial, sustained: isSustained(partial, seconds) };
      runs.push(run);
      progress.step(
        `course ${formatCount(offered).padStart(6)} req/s offered: ${
          formatCount(run.acceptedPerSecond)
        } accepted/s, ${formatCount(run.storedPerSecond)} stored/s, backlog ≤ ${
          formatCount(maxBacklog)
        }, not sent ${load.dropped}, non-202 ${
          load.rejected + load.failed
        }, stored ${run.stored} of ${load.accepted} accepted → ${
          run.sustained ? "sustained" : "not sustained"
        }; cores: ${
          Object.entries(run.cores).map(([part, n]) => `${part} ${n.toFixed(2)}`).join(", ")
        }`,
      );
      if (!run.sustained) break;
    }
    const sustained = runs.filter((r) => r.sustained).map((r) => r.offered);
    return {
      producers: 1,
      consumers: 1,
      runs,
      maxSustained: sustained.length ? Math.max(...sustained) : 0,
    };
  } finally {
    await Promise.all([producer.stop(), consumer.stop()]);
  }
}
