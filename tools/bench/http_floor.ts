/**
 * The HTTP floor of `POST /users`: `Deno.serve` + Hono reading the request's
 * body and answering 202, and nothing else — no metrics, no content-type
 * check, no validation, no id, no Redis. No API built on this runtime and
 * this router can answer the request for less, so the ingest phase reads our
 * API as a share of it, and Traefik in front of it (as many replicas as the
 * stack runs API replicas) is Traefik's ceiling, the top of the end-to-end
 * ladder. `GET /readyz` answers 200 only because the benchmark starts every
 * server the same way and Traefik's health check asks it.
 *
 * Reads env: PORT (default 8000).
 *
 * @module
 */

import { Hono } from "@hono/hono";

/** The floor's app: 202 to `POST /users` once its body is read. */
export function createFloorApp(): Hono {
  const app = new Hono();
  app.post("/users", async (c) => {
    // Read, not parsed: receiving the body is part of every server's request, parsing it is not.
    await c.req.arrayBuffer();
    return c.body(null, 202);
  });
  app.get("/readyz", (c) => c.body(null, 200));
  return app;
}

if (import.meta.main) {
  const server = Deno.serve({
    port: Number(Deno.env.get("PORT") ?? "8000"),
    hostname: "0.0.0.0",
    onListen: ({ port }) => console.log(`listening on :${port} (the HTTP floor)`),
  }, createFloorApp().fetch);
  // Graceful on SIGTERM like the other servers, so the benchmark's stop is quick and clean.
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void server.shutdown());
  }
  await server.finished;
}
