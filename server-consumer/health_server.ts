/**
 * The consumer's own small HTTP server: `GET /healthz` and `GET /readyz`
 * (`runtime/readiness.ts`) for Docker's healthcheck and any orchestrator, and
 * `GET /metrics` for Prometheus (`metrics.ts`), on PORT like the API (each
 * container has a network namespace of its own). It knows nothing of the
 * loop: `main.ts` tells the {@linkcode Readiness} when the consumer has
 * migrated and registered, and when it drains.
 *
 * @module
 */

import { errorText, type EventLog } from "@users-pipeline/runtime/event_log";
import { aliveResponse, type Readiness } from "@users-pipeline/runtime/readiness";

/** Options of {@linkcode healthHandler}. */
export interface HealthHandlerOptions {
  /** Answers `GET /metrics`. @default no /metrics route */
  readonly metrics?: () => Promise<Response>;
}

/**
 * The server's handler: the two probes, the metrics if given, and a JSON 404
 * or 405 for anything else.
 */
export function healthHandler(
  readiness: Readiness,
  options: HealthHandlerOptions = {},
): (request: Request) => Promise<Response> {
  const { metrics } = options;
  return async (request) => {
    const { pathname } = new URL(request.url);
    const known = pathname === "/healthz" || pathname === "/readyz" ||
      (pathname === "/metrics" && metrics !== undefined);
    if (!known) {
      return Response.json({ error: `no route for ${request.method} ${pathname}` }, {
        status: 404,
      });
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      return Response.json({ error: `${request.method} is not allowed on ${pathname}` }, {
        status: 405,
        headers: { Allow: "GET, HEAD" },
      });
    }
    if (pathname === "/metrics") return await metrics!();
    return pathname === "/healthz" ? aliveResponse() : await readiness.response();
  };
}

/** Options of {@linkcode serveHealth}. */
export interface ServeHealthOptions extends HealthHandlerOptions {
  /** The port; 0 picks a free one. */
  readonly port: number;
  /** @default "0.0.0.0" */
  readonly hostname?: string;
  /** Writes `listening`, or `listen_failed` when the port cannot be had. */
  readonly log: EventLog;
  /** Ends the process when the port cannot be had. @default Deno.exit */
  readonly exit?: (code: number) => never;
}

/**
 * Serves {@linkcode healthHandler} until the returned server's `shutdown()`.
 * A consumer that cannot serve its probes must not run unseen: when the port
 * cannot be had, it logs `listen_failed` and exits 1.
 */
export function serveHealth(
  readiness: Readiness,
  options: ServeHealthOptions,
): Deno.HttpServer<Deno.NetAddr> {
  const { port, hostname = "0.0.0.0", log, exit = Deno.exit, metrics } = options;
  try {
    return Deno.serve({
      port,
      hostname,
      onListen: ({ port }) =>
        log.info("listening", { port, msg: `/healthz, /readyz and /metrics on :${port}` }),
    }, healthHandler(readiness, { metrics }));
  } catch (error) {
    const msg = `Cannot serve /healthz and /readyz on port ${port}: ${errorText(error)}`;
    log.error("listen_failed", { port, error, msg });
    return exit(1);
  }
}
