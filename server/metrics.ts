/**
 * The API's Prometheus metrics: every request by route pattern and status,
 * its duration, the users accepted (one a `POST /users`, any number a
 * `POST /users/batch`), the `POST /users` refused by reason, and the users of
 * batches refused by reason: users per second, whatever the requests carry.
 * {@linkcode ApiMetrics.middleware} counts, and `GET /metrics` answers with
 * {@linkcode ApiMetrics.response} (both wired by `createApp`'s `metrics`).
 *
 * No label takes a value from the client unbounded: the route is the pattern
 * (`/users/:id`, never the id), an unknown method is `other`, a request
 * no route matched is `unmatched`, and the `client` of `client_users_total` is a name of
 * CLIENT_KEYS_FILE (never a key, nor an address), or `anonymous` without keys.
 *
 * @module
 */

import { IDEMPOTENT_REPLAYED } from "./idempotency_key.ts";
import type { Context, MiddlewareHandler } from "@hono/hono";
import { matchedRoutes } from "@hono/hono/route";
import { Counter, Histogram, type Registry } from "prom-client";
import {
  createRegistry,
  METRIC_PREFIX,
  metricsResponse,
} from "@users-pipeline/runtime/metrics_registry";
import { ApiError, type ErrorCode } from "./api_error.ts";
import { ANONYMOUS } from "./client_keys.ts";

/**
 * Why `POST /users` was refused: the queue at its bound, Redis failing, over the client's rate
 * (429), or a bad request (any other 4xx).
 */
export type Rejection = "full" | "unavailable" | "unconfirmed" | "limited" | "invalid";

const REJECTIONS: readonly Rejection[] = [
  "full",
  "unavailable",
  "unconfirmed",
  "limited",
  "invalid",
];

/** What became of a client's users: queued, refused over its rate (429), or refused otherwise. */
export type ClientOutcome = "accepted" | "rate_limited" | "refused";

const CLIENT_OUTCOMES: readonly ClientOutcome[] = ["accepted", "rate_limited", "refused"];

const METHODS: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "OPTIONS",
]);

/**
 * Request durations: a push to Redis takes about a millisecond, and
 * REDIS_TIMEOUT_MS (1 s by default) bounds a POST, so the buckets are dense
 * from 0.5 ms to a second and stop at 10 s.
 */
const DURATION_BUCKETS = [
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
];

/** Options of {@linkcode ApiMetrics}. */
export interface ApiMetricsOptions {
  /** This replica's id, the `replica` label. */
  readonly replica: string;
  /** Adds the process metrics (`runtime/metrics_registry.ts`). @default true */
  readonly processMetrics?: boolean;
  /** The clients' names, each counted from 0. @default ["anonymous"] */
  readonly clients?: readonly string[];
}

/** The API's metrics, in a registry of their own. */
export class ApiMetrics {
  readonly registry: Registry;
  readonly #requests: Counter<"method" | "route" | "status">;
  readonly #duration: Histogram<"method" | "route" | "status">;
  readonly #accepted: Counter;
  readonly #rejected: Counter<"reason">;
  readonly #batchRefused: Counter<"reason">;
  readonly #clientUsers: Counter<"client" | "outcome">;

  constructor(options: ApiMetricsOptions) {
    const { replica, processMetrics = true, clients = [ANONYMOUS] } = options;
    this.registry = createRegistry({ service: "server", replica, processMetrics });
    const registers = [this.registry];
    const labelNames = ["method", "route", "status"] as const;
    this.#requests = new Counter({
      name: `${METRIC_PREFIX}http_requests_total`,
      help: "HTTP requests answered, by method, route pattern and status.",
      labelNames,
      registers,
    });
    this.#duration = new Histogram({
      name: `${METRIC_PREFIX}http_request_duration_seconds`,
      help: "Time to answer an HTTP request, by method, route pattern and status.",
      labelNames,
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.#accepted = new Counter({
      name: `${METRIC_PREFIX}users_accepted_total`,
      help: "Users accepted (durably queued): by POST /users (answered 202), and the items of " +
        "POST /users/batch answered 202 (alone or in a 207).",
      registers,
    });
    this.#rejected = new Counter({
      name: `${METRIC_PREFIX}enqueue_rejections_total`,
      help: "POST /users refused, by reason: full (queue at its bound, 503), " +
        "unavailable (Redis failed or too slow, 503), unconfirmed (pushed, but fewer than " +
        "REDIS_WAIT_REPLICAS replicas confirmed it in time, 503), invalid (any 4xx).",
      labelNames: ["reason"],
      registers,
    });
    this.#batchRefused = new Counter({
      name: `${METRIC_PREFIX}batch_users_refused_total`,
      help: "Users of POST /users/batch refused 503 (in a 207 or a 503), by reason: full, " +
        "unavailable, unconfirmed (as for enqueue_rejections_total). A batch refused 4xx " +
        "counts as a request only.",
      labelNames: ["reason"],
      registers,
    });
    this.#clientUsers = new Counter({
      name: `${METRIC_PREFIX}client_users_total`,
      help: "Users of POST /users and POST /users/batch by client (its name in " +
        "CLIENT_KEYS_FILE, or anonymous without keys) and outcome: accepted (queued), " +
        "rate_limited (429) or refused (any other answer). A request refused for its key has " +
        "no client and counts as a request only.",
      labelNames: ["client", "outcome"],
      registers,
    });
    // Every reason from the start, so a rate() over it is 0 rather than absent.
    for (const reason of REJECTIONS) this.#rejected.inc({ reason }, 0);
    for (const reason of REJECTIONS.slice(0, 3)) this.#batchRefused.inc({ reason }, 0);
    for (const client of clients) {
      for (const outcome of CLIENT_OUTCOMES) this.#clientUsers.inc({ client, outcome }, 0);
    }
  }

  /** Counts `users` of `client` with their outcome. */
  countClient(client: string, outcome: ClientOutcome, users: number): void {
    this.#clientUsers.inc({ client, outcome }, users);
  }

  /**
   * Counts the users of one `POST /users/batch` from `client`: `accepted` queued by it (none for
   * a repeat of a key's batch), and one refusal per code of `refused`, its items answered 503.
   */
  countBatch(client: string, accepted: number, refused: readonly ErrorCode[]): void {
    if (accepted > 0) {
      this.#accepted.inc(accepted);
      this.countClient(client, "accepted", accepted);
    }
    for (const code of refused) {
      this.#batchRefused.inc({ reason: rejectionOfCode(code) });
    }
    if (refused.length > 0) this.countClient(client, "refused", refused.length);
  }

  /** Counts and times every request; mount it before the routes. */
  readonly middleware: MiddlewareHandler = async (c, next) => {
    const started = performance.now();
    await next();
    const seconds = (performance.now() - started) / 1_000;
    const route = routeOf(c);
    const method = METHODS.has(c.req.method) ? c.req.method : "other";
    const { status } = c.res;
    const labels = { method, route, status: String(status) };
    this.#requests.inc(labels);
    this.#duration.observe(labels, seconds);
    if (method === "POST" && route === "/users") {
      // A repeat of an Idempotency-Key's request accepted no one new, and says so in a header
      // that no other answer has (read from the answer: a request's header costs a call into Deno).
      const client = c.get("client") as string | undefined;
      if (status === 202) {
        if (c.res.headers.get(IDEMPOTENT_REPLAYED) === null) {
          this.#accepted.inc();
          if (client !== undefined) this.countClient(client, "accepted", 1);
        }
      } else {
        const rejection = rejectionOf(status, c.error);
        if (rejection !== undefined) this.#rejected.inc({ reason: rejection });
        // A 429 is counted where it is decided (`app.ts`), with its cost; a refused key has no client.
        if (client !== undefined && status !== 429) this.countClient(client, "refused", 1);
      }
    }
  };

  /** The metrics in Prometheus' text format, for `GET /metrics`. */
  response(): Promise<Response> {
    return metricsResponse(this.registry);
  }
}

/** The pattern of the route that answered (the last one matched that is not middleware). */
function routeOf(c: Context): string {
  const routes = matchedRoutes(c);
  for (let i = routes.length - 1; i >= 0; i--) {
    if (routes[i]!.method !== "ALL") return routes[i]!.path;
  }
  return "unmatched";
}

/** Why an answer to `POST /users` is a refusal, or `undefined` if it is none of ours. */
export function rejectionOf(status: number, error: Error | undefined): Rejection | undefined {
  if (status === 429) return "limited";
  if (status >= 400 && status < 500) return "invalid";
  if (status !== 503) return undefined;
  if (!(error instanceof ApiError)) return "unavailable";
  return rejectionOfCode(error.code);
}

/** Why a user was refused 503 with `code`. */
function rejectionOfCode(code: ErrorCode): Exclude<Rejection, "invalid"> {
  if (code === "queue_full") return "full";
  return code === "unconfirmed" ? "unconfirmed" : "unavailable";
}
