/**
 * The course's own producer, as its chapter on Redis message queues writes it,
 * for the `course` target of the ingest phase (directly) and of the traefik
 * phase (behind Traefik, one replica) (the targets: our API takes users at
 * least as fast as this behind the same Traefik, for no more CPU per request
 * directly): a Hono app whose `POST /users` takes the name
 * from the JSON body, LPUSHes `{ name }` onto a Redis list with ioredis'
 * defaults and answers 202 "Accepted". Nothing else, on purpose: no
 * content-type check, no body limit, no validation, no id, no envelope, no
 * queue bound, no deadline, no readiness of Redis — what our API does on top
 * of this is what the comparison prices. The one addition is `GET /readyz`,
 * which the course has not: the benchmark starts every server the same way
 * and waits for it to answer.
 *
 * Reads env: PORT (default 8000), REDIS_URL (default ioredis' own,
 * 127.0.0.1:6379).
 *
 * @module
 */

import { Hono } from "@hono/hono";
import { Redis } from "ioredis";

/** The course's list: a constant in its code, so one here too. */
export const COURSE_QUEUE_NAME = "users-course";

/** What the producer needs of Redis (an ioredis client; a fake in tests). */
export interface CourseRedis {
  lpush(key: string, value: string): Promise<unknown>;
}

/** The course's producer app, pushing to `redis`. */
export function createCourseApp(redis: CourseRedis): Hono {
  const app = new Hono();
  app.post("/users", async (c) => {
    const { name } = await c.req.json();
    await redis.lpush(COURSE_QUEUE_NAME, JSON.stringify({ name }));
    c.status(202);
    return c.body("Accepted");
  });
  app.get("/readyz", (c) => c.text("ready"));
  return app;
}

if (import.meta.main) {
  const url = Deno.env.get("REDIS_URL");
  // The course's `new Redis(6379, "redis")`: ioredis' defaults, only the address differs.
  const redis = url === undefined ? new Redis() : new Redis(url);
  const server = Deno.serve({
    port: Number(Deno.env.get("PORT") ?? "8000"),
    hostname: "0.0.0.0",
    onListen: ({ port }) => console.log(`listening on :${port} (the course's producer)`),
  }, createCourseApp(redis).fetch);
  // Graceful on SIGTERM like the other servers, so the benchmark's stop is quick and clean.
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void server.shutdown());
  }
  await server.finished;
  redis.disconnect();
}
