/**
 * The course's consumer, kept only as the fault suite's control: BRPOP one
 * item, INSERT it, repeat. The pop removes the item from Redis before the row
 * exists, so a crash between the two loses it. The suite SIGKILLs this
 * consumer the way it kills the real one and expects its checker to report
 * losses: proof that the checker can see a loss at all. Holding one item at a
 * time, it loses at most one per SIGKILL and stores nothing twice, so with
 * every request answered 202 a loss beyond that is not this consumer's.
 *
 * Test-only; never shipped. Run as a process of its own with `startNaiveConsumer`.
 * Like the services it says when it is ready with one JSON event on a line,
 * `{"event":"naive_consumer_started","queue":…}`, and SIGTERM ends it at once
 * with exit 0 (it holds nothing it could finish).
 *
 * Reads env: REDIS_URL, QUEUE_NAME, PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE.
 *
 * @module
 */

import { Redis } from "ioredis";
import postgres from "postgres";
import { forEachLine } from "@users-pipeline/harness/line_output";

/** A naive consumer process; SIGKILL it with `kill()`. */
export interface NaiveConsumer extends AsyncDisposable {
  readonly pid: number;
  readonly output: string[];
  readonly status: Promise<Deno.CommandStatus>;
  kill(signal?: Deno.Signal): void;
}

/** Starts this module as a process of its own (no task runner in between, so kill hits it). */
export function startNaiveConsumer(env: Record<string, string>): NaiveConsumer {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--cached-only", "--allow-net", "--allow-env", new URL(import.meta.url).pathname],
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output: string[] = [];
  const collect = (stream: ReadableStream<Uint8Array>) =>
    forEachLine(stream, (line) => {
      if (line !== "") output.push(line);
    });
  const drained = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const status = child.status.then(async (s) => {
    await drained;
    return s;
  });
  const kill = (signal: Deno.Signal = "SIGKILL") => {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  };
  return {
    pid: child.pid,
    output,
    status,
    kill,
    async [Symbol.asyncDispose]() {
      kill("SIGKILL");
      await status;
    },
  };
}

if (import.meta.main) {
  const env = Deno.env.toObject();
  const queue = env.QUEUE_NAME ?? "users";
  const redis = new Redis(env.REDIS_URL ?? "redis://127.0.0.1:6379");
  const sql = postgres({
    host: env.PGHOST,
    port: Number(env.PGPORT),
    user: env.PGUSER,
    password: env.PGPASSWORD,
    database: env.PGDATABASE,
    max: 1,
    onnotice: () => {},
  });
  Deno.addSignalListener("SIGTERM", () => Deno.exit(0));
  console.log(JSON.stringify({ event: "naive_consumer_started", queue }));
  for (;;) {
    const popped = await redis.brpop(queue, 0);
    if (popped === null) continue;
    const user = JSON.parse(popped[1]);
    await sql`insert into users (id, name, enqueued_at)
      values (${user.id}, ${user.name}, to_timestamp(${user.enqueued_at} / 1000.0))`;
  }
}
