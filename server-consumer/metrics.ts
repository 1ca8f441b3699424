/**
 * The consumer's Prometheus metrics, served on its health port's
 * `GET /metrics`: what the loop stored, buried, retried and recovered, how
 * big its batches are and how long their inserts and the users' whole trip
 * (enqueue → commit) take, fed by the loop's events and measurements; and the
 * queue itself (depth by state, age of the oldest waiting item), read from
 * Redis at scrape time.
 *
 * The queue's gauges are the same on every consumer replica (aggregate them
 * with `max`, not `sum`). A scrape never fails for them: while Redis does not
 * answer within {@linkcode QUEUE_STATS_TIMEOUT_MS} they are left out (a stale
 * value would hide the outage) and `users_pipeline_queue_stats_up` is 0.
 *
 * @module
 */

import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { withDeadline } from "@users-pipeline/runtime/deadline";
import {
  createRegistry,
  METRIC_PREFIX,
  metricsResponse,
} from "@users-pipeline/runtime/metrics_registry";
import { DEAD_LETTER_KINDS, type QueueStats } from "@users-pipeline/queue";
import type { Dependency } from "./backoff.ts";
import type { ConsumerEvent, ConsumerMeasurement } from "./consumer_events.ts";

/**
 * The longest a scrape waits for the queue's numbers: a live Redis answers in
 * a millisecond, and Prometheus' own scrape timeout (2 s in
 * `prometheus/prometheus.yml`) must never be the one that fires.
 */
export const QUEUE_STATS_TIMEOUT_MS = 1_000;

const DEPENDENCIES: readonly Dependency[] = ["redis", "postgres"];
const STATES: readonly (keyof QueueStats["depth"])[] = ["queued", "retry", "processing", "dead"];
const WAITING: readonly (keyof QueueStats["oldestAgeSeconds"])[] = ["queued", "retry"];

/** Rows per batch: 1 in single mode, up to BATCH_SIZE (at most 10000). */
const BATCH_BUCKETS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000];

/** One insert statement: a millisecond for a row, up to STATEMENT_TIMEOUT_MS (10 s) for a batch. */
const INSERT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Enqueue to commit: milliseconds with no backlog, minutes while one drains
 * or PostgreSQL is down.
 */
const LATENCY_BUCKETS = [
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
  30,
  60,
  120,
  300,
  600,
];

/** Options of {@linkcode ConsumerMetrics}. */
export interface ConsumerMetricsOptions {
  /** This replica's id, the `replica` label. */
  readonly replica: string;
  /** Reads the queue's numbers at scrape time. @default no queue gauges */
  readonly queueStats?: () => Promise<QueueStats>;
  /** The longest a scrape waits for `queueStats`. @default QUEUE_STATS_TIMEOUT_MS */
  readonly queueStatsTimeoutMs?: number;
  /** Adds the process metrics (`runtime/metrics_registry.ts`). @default true */
  readonly processMetrics?: boolean;
}

/** The consumer's metrics, in a registry of their own. */
export class ConsumerMetrics {
  readonly registry: Registry;
  readonly #stored: Counter;
  readonly #deadLetters: Counter<"reason">;
  readonly #batchItems: Histogram;
  readonly #insertSeconds: Histogram;
  readonly #latencySeconds: Histogram;
  readonly #dbErrors: Counter<"sqlstate_class">;
  readonly #redisErrors: Counter;
  readonly #redeliveries: Counter;
  readonly #recovered: Counter;
  readonly #outage: Gauge<"dependency">;
  readonly #queueStats: (() => Promise<QueueStats>) | undefined;
  readonly #queueStatsTimeoutMs: number;
  /** The read in flight, shared by the gauges of one scrape (prom-client collects them at once). */
  #reading: Promise<QueueStats | undefined> | undefined;

  constructor(options: ConsumerMetricsOptions) {
    const {
      replica,
      queueStats,
      queueStatsTimeoutMs = QUEUE_STATS_TIMEOUT_MS,
      processMetrics = true,
    } = options;
    this.registry = createRegistry({ service: "server-consumer", replica, processMetrics });
    this.#queueStats = queueStats;
    this.#queueStatsTimeoutMs = queueStatsTimeoutMs;
    const registers = [this.registry];
    this.#stored = new Counter({
      name: `${METRIC_PREFIX}users_stored_total`,
      help: "Rows acknowledged as stored (a redelivered row already there counts again).",
      registers,
    });
    this.#deadLetters = new Counter({
      name: `${METRIC_PREFIX}dead_letters_total`,
      help: "Items buried in the dead letters, by reason: invalid_item (not an envelope), " +
        "database_refused (PostgreSQL refused the row), id_conflict (id stored under another " +
        "name), consumer_crashed (held by MAX_CRASHES crashed consumers).",
      labelNames: ["reason"],
      registers,
    });
    for (const reason of DEAD_LETTER_KINDS.filter((kind) => kind !== "unknown")) {
      this.#deadLetters.inc({ reason }, 0);
    }
    this.#batchItems = new Histogram({
      name: `${METRIC_PREFIX}batch_items`,
      help: "Items per acknowledged batch.",
      buckets: BATCH_BUCKETS,
      registers,
    });
    this.#insertSeconds = new Histogram({
      name: `${METRIC_PREFIX}insert_duration_seconds`,
      help: "Time to store one batch in PostgreSQL (the attempt that succeeded).",
      buckets: INSERT_BUCKETS,
      registers,
    });
    this.#latencySeconds = new Histogram({
      name: `${METRIC_PREFIX}enqueue_to_stored_seconds`,
      help: "Time from the API's enqueue to the commit of the row, per row stored.",
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#dbErrors = new Counter({
      name: `${METRIC_PREFIX}db_errors_total`,
      help: "Failed PostgreSQL calls the loop retries, by SQLSTATE class (first two " +
        "characters; none for an error without one, such as a refused connection or a timeout).",
      labelNames: ["sqlstate_class"],
      registers,
    });
    this.#redisErrors = new Counter({
      name: `${METRIC_PREFIX}redis_errors_total`,
      help: "Failed Redis calls the loop retries.",
      registers,
    });
    this.#redeliveries = new Counter({
      name: `${METRIC_PREFIX}redeliveries_total`,
      help: "Items taken from the retry list (recovered from a crashed consumer) and acknowledged.",
      registers,
    });
    this.#recovered = new Counter({
      name: `${METRIC_PREFIX}recovered_total`,
      help: "Items this consumer took back from consumers whose heartbeat expired.",
      registers,
    });
    this.#outage = new Gauge({
      name: `${METRIC_PREFIX}dependency_outage`,
      help: "1 while the loop is retrying a failing dependency (redis, postgres), else 0.",
      labelNames: ["dependency"],
      registers,
    });
    for (const dependency of DEPENDENCIES) this.#outage.set({ dependency }, 0);
    if (queueStats !== undefined) this.#queueGauges(registers);
  }

  /** Counts what the loop reports (`main.ts` also writes it to the log). */
  onEvent(event: ConsumerEvent): void {
    switch (event.event) {
      case "outage_started":
        this.#outage.set({ dependency: event.dependency }, 1);
        break;
      case "outage_ended":
        this.#outage.set({ dependency: event.dependency }, 0);
        break;
      case "recovered":
        this.#recovered.inc(event.items);
        this.#deadLetters.inc({ reason: "consumer_crashed" }, event.buried);
        break;
    }
  }

  /** Records what the loop measured. */
  onMeasurement(measurement: ConsumerMeasurement): void {
    if (measurement.type === "call_failed") {
      if (measurement.dependency === "redis") this.#redisErrors.inc();
      else this.#dbErrors.inc({ sqlstate_class: sqlstateClass(measurement.error) });
      return;
    }
    const { items, fromRetry, stored, deadLetters, insertSeconds, latenciesSeconds } = measurement;
    this.#batchItems.observe(items);
    this.#stored.inc(stored);
    if (fromRetry) this.#redeliveries.inc(items);
    for (const reason of deadLetters) this.#deadLetters.inc({ reason });
    if (insertSeconds !== undefined) this.#insertSeconds.observe(insertSeconds);
    for (const seconds of latenciesSeconds) this.#latencySeconds.observe(seconds);
  }

  /** The metrics in Prometheus' text format, for `GET /metrics`. */
  response(): Promise<Response> {
    return metricsResponse(this.registry);
  }

  /** The queue's gauges, set at scrape time from one read of Redis. */
  #queueGauges(registers: Registry[]): void {
    const read = () => this.#readQueueStats();
    new Gauge({
      name: `${METRIC_PREFIX}queue_stats_up`,
      help: "1 when the queue's gauges could be read from Redis at this scrape, else 0 " +
        "(they are then left out).",
      registers,
      async collect() {
        this.set((await read()) === undefined ? 0 : 1);
      },
    });
    new Gauge({
      name: `${METRIC_PREFIX}queue_depth`,
      help: "Items in the queue by state: queued (main list), retry (recovered, to take " +
        "first), processing (in consumers' hands), dead (dead letters).",
      labelNames: ["state"],
      registers,
      async collect() {
        const stats = await read();
        this.reset();
        if (stats === undefined) return;
        for (const state of STATES) this.set({ state }, stats.depth[state]);
      },
    });
    new Gauge({
      name: `${METRIC_PREFIX}queue_oldest_age_seconds`,
      help: "Age of the oldest item waiting in the main list (queued) and the retry list " +
        "(retry), from its enqueue by the API; 0 when the list is empty.",
      labelNames: ["state"],
      registers,
      async collect() {
        const stats = await read();
        this.reset();
        if (stats === undefined) return;
        for (const state of WAITING) {
          const age = stats.oldestAgeSeconds[state];
          if (age !== undefined) this.set({ state }, age);
        }
      },
    });
  }

  /** One read per scrape, whatever the number of gauges; `undefined` if Redis did not answer. */
  #readQueueStats(): Promise<QueueStats | undefined> {
    this.#reading ??= withDeadline(this.#queueStats!(), {
      ms: this.#queueStatsTimeoutMs,
      what: "read the queue's numbers",
    }).catch(() => undefined).finally(() => this.#reading = undefined);
    return this.#reading;
  }
}

/** The SQLSTATE class (its first two characters) of an error, or `none`. */
export function sqlstateClass(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code.slice(0, 2) : "none";
}
