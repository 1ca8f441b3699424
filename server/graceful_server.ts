/**
 * The API's listener and its two-phase stop. On a stop (SIGTERM/SIGINT) it
 * first drains: `/readyz` answers 503 while everything else is served as
 * before, for `drainMs`, so that Traefik's health check takes the replica out
 * of the rotation before its listener closes (otherwise clients get 502s).
 * Then it closes its listener (a connection refused before anything was sent
 * is one Traefik retries on another replica), lets the requests in flight
 * finish, closes the clients, and stays alive a moment with the port closed
 * so that a proxy still listing it is refused at once. It never answers a
 * request it received with a refusal of its own.
 *
 * It logs `listening`, `stopping` (the drain begins) and `stopped` (the last
 * line, after the linger).
 *
 * @module
 */

import { type Clock, systemClock } from "@users-pipeline/runtime/clock";
import { withDeadline } from "@users-pipeline/runtime/deadline";
import { errorText, type EventLog } from "@users-pipeline/runtime/event_log";

/**
 * The longest wait for in-flight requests once the listener is closed: a POST
 * is bounded by its deadline.
 */
export const IN_FLIGHT_GRACE_MS = 10_000;

/**
 * How long the process stays alive after closing its listener. A proxy whose configuration still
 * lists this replica may still pick it (Traefik's Swarm provider polls every second and applies
 * changes at most every 2 s; the drain covers most of that). While the process lives, its address
 * refuses such a connection at once, before anything is sent, and Traefik's retry takes the
 * request to another replica; once it exits, the address stops answering and the connection waits
 * for Traefik's 1 s dial timeout first. Longer would hold every request back as long while all
 * replicas restart at once.
 */
export const CLOSED_LINGER_MS = 1_000;

/** Options of {@linkcode serveGracefully}. */
export interface GracefulServerOptions {
  /** The port to listen on; 0 picks a free one. */
  readonly port: number;
  /** @default "0.0.0.0" */
  readonly hostname?: string;
  /** Told when the drain begins, so that `/readyz` answers 503 from then on. */
  readonly readiness: { drain(): void };
  /** How long the drain serves everything before the listener closes (SHUTDOWN_DRAIN_MS). */
  readonly drainMs: number;
  /** Closes the process's clients once no request is in flight. */
  readonly close: () => Promise<void>;
  /** Writes `listening`, `stopping` and `stopped`. */
  readonly log: EventLog;
  /**
   * Listen once this settles (either way), not before.
   * @default listen at once
   */
  readonly listenWhen?: Promise<unknown>;
  /** @default {@linkcode IN_FLIGHT_GRACE_MS} */
  readonly inFlightGraceMs?: number;
  /** @default {@linkcode CLOSED_LINGER_MS} */
  readonly lingerMs?: number;
  /** Whose time the drain, the grace and the linger are counted on. @default systemClock */
  readonly clock?: Clock;
}

/** A server started by {@linkcode serveGracefully}. */
export interface GracefulServer {
  /** The address it listens on. */
  readonly addr: Deno.NetAddr;
  /**
   * Drains, closes the listener, finishes the requests in flight, closes the
   * clients and lingers; resolves once stopped. A second call (a second
   * signal) returns the first call's promise.
   */
  stop(signal: Deno.Signal): Promise<void>;
  /** Settles once the server stopped: after the linger when {@linkcode stop} was called. */
  readonly finished: Promise<void>;
}

/** Serves `handler` on the options' port (once `listenWhen` settled) until {@linkcode GracefulServer.stop}. */
export async function serveGracefully(
  handler: Deno.ServeHandler<Deno.NetAddr>,
  options: GracefulServerOptions,
): Promise<GracefulServer> {
  const {
    port,
    hostname = "0.0.0.0",
    readiness,
    drainMs,
    close,
    log,
    listenWhen,
    inFlightGraceMs = IN_FLIGHT_GRACE_MS,
    lingerMs = CLOSED_LINGER_MS,
    clock = systemClock,
  } = options;
  /** Set once a stop begins: the drain has begun. */
  let stopping: Promise<void> | undefined;

  /**
   * Every request is served in full until the listener closes: a stopping replica never refuses a
   * request it received, since it can still queue it. Once stopping, every answer tells the client
   * to close its connection (`Connection: close`; the runtime leaves the closing to the client,
   * which Traefik does). Otherwise Traefik keeps idle keep-alive connections to this replica, and
   * when the listener finally closes them, a request Traefik is writing on one at that moment fails
   * after its headers went out: Traefik cannot know whether it was received, does not retry it,
   * and its client gets a 502. With no idle connection left, a late request finds the port closed
   * before sending anything, which Traefik's retry sends on.
   */
  const serve = async (request: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) => {
    const response = await handler(request, info);
    return stopping === undefined ? response : closingConnection(response);
  };

  await listenWhen?.catch(() => {});
  const server = Deno.serve({
    port,
    hostname,
    onListen: ({ port }) => log.info("listening", { port, msg: `listening on :${port}` }),
    // Deno passes here what the handler threw (the app answers every error itself) and the error of
    // a response body that failed while it was sent. One fails on purpose: the app's 413 to a body
    // over its discard bound drops the connection so (`app.ts`), which is no news for the log.
    onError: (error) => {
      if (!(error instanceof Deno.errors.ConnectionAborted)) {
        log.error("unexpected_error", {
          error,
          stack: error instanceof Error ? error.stack : undefined,
          msg: `unexpected error: ${errorText(error)}`,
        });
      }
      return new Response(null, { status: 500 });
    },
  }, serve);

  const stop = (signal: Deno.Signal): Promise<void> => {
    stopping ??= (async () => {
      readiness.drain();
      log.info("stopping", {
        signal,
        drain_ms: drainMs,
        msg: `${signal}: not ready; serving ${drainMs} ms more so the load balancer stops ` +
          `routing here, then finishing in-flight requests`,
      });
      await clock.sleep(drainMs);
      // No new connection from here on; the requests already received are answered in full.
      await withDeadline(server.shutdown(), {
        ms: inFlightGraceMs,
        what: "finish the requests in flight",
        clock,
      }).catch(() => {});
      await close();
      await clock.sleep(lingerMs);
      log.info("stopped", { msg: "stopped" });
    })();
    return stopping;
  };

  return {
    addr: server.addr,
    stop,
    finished: server.finished.then(() => stopping),
  };
}

/** `response` with `Connection: close`. */
function closingConnection(response: Response): Response {
  try {
    response.headers.set("Connection", "close");
    return response;
  } catch {
    // Immutable headers (a response passed through from fetch): copy them.
    const copy = new Response(response.body, response);
    copy.headers.set("Connection", "close");
    return copy;
  }
}
