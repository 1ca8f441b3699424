/**
 * A diagnostic of the ingest phase, not a floor: the API's own app
 * (`createApp` from `server/app.ts`: metrics, content-type check, body limit,
 * JSON parse, validation, UUIDv7, 202 with the id) on the same `Deno.serve`,
 * with an `accept` that resolves at once instead of pushing to Redis. Beside
 * the HTTP floor (`http_floor.ts`) it splits what the API costs between its
 * app and its queue; since it is our own code with a part taken out, no
 * target is read against it.
 *
 * Reads env: PORT (default 8000), BODY_LIMIT_BYTES (default 16384).
 *
 * @module
 */

import { createApp } from "@users-pipeline/server/app";
import { ApiMetrics } from "@users-pipeline/server/metrics";

const port = Number(Deno.env.get("PORT") ?? "8000");
const bodyLimitBytes = Number(Deno.env.get("BODY_LIMIT_BYTES") ?? "16384");

const app = createApp({
  accept: () => Promise.resolve(),
  userStatus: () => Promise.resolve(undefined),
  listUsers: () => Promise.resolve([]),
  bodyLimitBytes,
  // Counted and timed as the API's every request is, so that beside queue mode only the queue
  // differs.
  metrics: new ApiMetrics({ replica: "reference" }),
});

const server = Deno.serve({
  port,
  hostname: "0.0.0.0",
  onListen: ({ port }) => console.log(`listening on :${port} (the API's app without Redis)`),
}, app.fetch);

// Graceful on SIGTERM like server/main.ts, so a CPU profile is written on exit.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.addSignalListener(signal, () => void server.shutdown());
}
await server.finished;
