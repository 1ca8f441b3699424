/**
 * The API's Prometheus metrics: every request by route pattern and status,
 * its duration, the users accepted and the `POST /users` refused by reason.
 * {@linkcode ApiMetrics.middleware} counts, and `GET /metrics` answers with
 * {@linkcode ApiMetrics.response} (both wired by `createApp`'s `metrics`).
 *
 * No label takes a value from the client unbounded: the route is the pattern
 * (`/users/:id`, never the id), an unknown method is `other`, and a request
 * no route matched is `unmatched`.
 *
 * @module
 */

import { IDEMPOTENT_REPLAYED } from "./idempotency_key.ts";
import type { Context, MiddlewareHandler } from "@hono/hono";
import { matchedRoutes } from "@hono/hono/route";
import { Counter, type Registry } from "prom-client";
import {
  createRegistry,
  METRIC_PREFIX,
  metricsResponse,
} from "@users-pipeline/runtime/metrics_registry";
import { ApiError } from "./api_error.ts";
import { BucketedHistogram, type HistogramSeries } from "./bucketed_histogram.ts";

/** Why `POST /users` was refused: the queue at its bound, Redis failing, or a bad request (4xx). */
export type Rejection = "full" | "unavailable" | "unconfirmed" | "invalid";

const REJECTIONS: readonly Rejection[] = ["full", "unavailable", "unconfirmed", "invalid"];

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
}

type RequestLabels = Record<"method" | "route" | "status", string>;

/**
 * The requests of one method, route pattern and status: their labels and
 * duration histogram, bound once, and the requests answered since the
 * counter was last read.
 */
interface RequestSeries {
  readonly duration: HistogramSeries;
  readonly labels: RequestLabels;
  unread: number;
}

/** The API's metrics, in a registry of their own. */
export class ApiMetrics {
  readonly registry: Registry;
  readonly #requests: Counter<"method" | "route" | "status">;
  readonly #duration: BucketedHistogram;
  readonly #accepted: Counter;
  readonly #rejected: Counter<"reason">;
  /**
   * Every series met so far, by method, route and status. The counts wait
   * here until a scrape reads them (the counters' `collect`): one addition
   * per request instead of one prom-client `inc`, whose label checks and hash
   * cost as much as the rest of the metrics. The durations are counted in
   * their series' buckets (`bucketed_histogram.ts`) for the same reason.
   */
  readonly #series = new Map<string, Map<string, Map<number, RequestSeries>>>();
  /** Users accepted since the counter was last read. */
  #acceptedUnread = 0;

  constructor(options: ApiMetricsOptions) {
    const { replica, processMetrics = true } = options;
    this.registry = createRegistry({ service: "server", replica, processMetrics });
    const registers = [this.registry];
    const labelNames = ["method", "route", "status"] as const;
    this.#requests = new Counter({
      name: `${METRIC_PREFIX}http_requests_total`,
      help: "HTTP requests answered, by method, route pattern and status.",
      labelNames,
      registers,
      collect: () => this.#readRequests(),
    });
    this.#duration = new BucketedHistogram({
      name: `${METRIC_PREFIX}http_request_duration_seconds`,
      help: "Time to answer an HTTP request, by method, route pattern and status.",
      buckets: DURATION_BUCKETS,
      registers,
    });
    this.#accepted = new Counter({
      name: `${METRIC_PREFIX}users_accepted_total`,
      help: "Users accepted by POST /users (answered 202: durably queued).",
      registers,
      collect: () => {
        this.#accepted.inc(this.#acceptedUnread);
        this.#acceptedUnread = 0;
      },
    });
    this.#rejected = new Counter({
      name: `${METRIC_PREFIX}enqueue_rejections_total`,
      help: "POST /users refused, by reason: full (queue at its bound, 503), " +
        "unavailable (Redis failed or too slow, 503), unconfirmed (pushed, but fewer than " +
        "REDIS_WAIT_REPLICAS replicas confirmed it in time, 503), invalid (any 4xx).",
      labelNames: ["reason"],
      registers,
    });
    // Every reason from the start, so a rate() over it is 0 rather than absent.
    for (const reason of REJECTIONS) this.#rejected.inc({ reason }, 0);
  }

  /** Counts and times every request; mount it before the routes. */
  readonly middleware: MiddlewareHandler = async (c, next) => {
    const started = performance.now();
    await next();
    const seconds = (performance.now() - started) / 1_000;
    const route = routeOf(c);
    const method = METHODS.has(c.req.method) ? c.req.method : "other";
    const { status } = c.res;
    const series = this.#seriesOf({ method, route, status });
    series.unread++;
    series.duration.observe(seconds);
    if (method === "POST" && route === "/users") {
      // A repeat of an Idempotency-Key's request accepted no one new, and says so in a header
      // that no other answer has (read from the answer: a request's header costs a call into Deno).
      if (status === 202) {
        if (c.res.headers.get(IDEMPOTENT_REPLAYED) === null) this.#acceptedUnread++;
      } else {
        const rejection = rejectionOf(status, c.error);
        if (rejection !== undefined) this.#rejected.inc({ reason: rejection });
      }
    }
  };

  #seriesOf(
    { method, route, status }: { method: string; route: string; status: number },
  ): RequestSeries {
    let byRoute = this.#series.get(method);
    if (byRoute === undefined) this.#series.set(method, byRoute = new Map());
    let byStatus = byRoute.get(route);
    if (byStatus === undefined) byRoute.set(route, byStatus = new Map());
    let series = byStatus.get(status);
    if (series === undefined) {
      const labels = { method, route, status: String(status) };
      byStatus.set(status, series = { duration: this.#duration.series(labels), labels, unread: 0 });
    }
    return series;
  }

  /** Hands the requests counted since the last read to their counter. */
  #readRequests(): void {
    for (const byRoute of this.#series.values()) {
      for (const byStatus of byRoute.values()) {
        for (const series of byStatus.values()) {
          if (series.unread > 0) this.#requests.inc(series.labels, series.unread);
          series.unread = 0;
        }
      }
    }
  }

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
  if (status >= 400 && status < 500) return "invalid";
  if (status !== 503) return undefined;
  if (!(error instanceof ApiError)) return "unavailable";
  if (error.code === "queue_full") return "full";
  return error.code === "unconfirmed" ? "unconfirmed" : "unavailable";
}
