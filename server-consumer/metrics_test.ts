import assert from "node:assert/strict";
import type { QueueStats } from "@users-pipeline/queue";
import { ConsumerMetrics, sqlstateClass } from "./metrics.ts";

const STATS: QueueStats = {
  depth: { queued: 120, retry: 1, processing: 1_000, dead: 3 },
  oldestAgeSeconds: { queued: 42.5, retry: undefined },
};

/** The scrape's text, and the value of the series `line` names (undefined if absent). */
async function scrape(metrics: ConsumerMetrics) {
  const res = await metrics.response();
  assert.equal(res.status, 200);
  const text = await res.text();
  const value = (series: string): number | undefined => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  return { text, value };
}

const LABELS = 'service="server-consumer",replica="consumer-1"';

Deno.test("ConsumerMetrics counts stored rows, batches, inserts, latencies and dead letters", async () => {
  const metrics = new ConsumerMetrics({ replica: "consumer-1", processMetrics: false });
  metrics.onMeasurement({
    type: "batch_acked",
    items: 4,
    fromRetry: false,
    stored: 2,
    deadLetters: ["invalid_item", "database_refused"],
    insertSeconds: 0.004,
    latenciesSeconds: [0.2, 3],
  });
  metrics.onMeasurement({
    type: "batch_acked",
    items: 1,
    fromRetry: true,
    stored: 1,
    deadLetters: [],
    insertSeconds: 0.001,
    latenciesSeconds: [30],
  });
  metrics.onEvent({ event: "recovered", items: 5, buried: 2, consumers: 1 });
  const { value } = await scrape(metrics);
  assert.equal(value(`users_pipeline_users_stored_total{${LABELS}}`), 3);
  assert.equal(value(`users_pipeline_dead_letters_total{reason="invalid_item",${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_dead_letters_total{reason="database_refused",${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_dead_letters_total{reason="id_conflict",${LABELS}}`), 0);
  assert.equal(value(`users_pipeline_dead_letters_total{reason="consumer_crashed",${LABELS}}`), 2);
  assert.equal(value(`users_pipeline_redeliveries_total{${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_recovered_total{${LABELS}}`), 5);
  assert.equal(value(`users_pipeline_batch_items_count{${LABELS}}`), 2);
  assert.equal(value(`users_pipeline_batch_items_sum{${LABELS}}`), 5);
  assert.equal(value(`users_pipeline_insert_duration_seconds_count{${LABELS}}`), 2);
  assert.equal(value(`users_pipeline_enqueue_to_stored_seconds_count{${LABELS}}`), 3);
  assert.equal(value(`users_pipeline_enqueue_to_stored_seconds_bucket{le="5",${LABELS}}`), 2);
});

Deno.test("ConsumerMetrics counts failed calls: PostgreSQL's by SQLSTATE class, and outages", async () => {
  const metrics = new ConsumerMetrics({ replica: "consumer-1", processMetrics: false });
  const pgError = (code: string) => Object.assign(new Error("pg"), { code });
  for (const error of [pgError("57P01"), pgError("57P03"), pgError("08006"), new Error("t")]) {
    metrics.onMeasurement({ type: "call_failed", dependency: "postgres", error });
  }
  metrics.onMeasurement({ type: "call_failed", dependency: "redis", error: new Error("closed") });
  metrics.onEvent({ event: "outage_started", dependency: "postgres", error: pgError("57P01") });
  const { value } = await scrape(metrics);
  assert.equal(value(`users_pipeline_db_errors_total{sqlstate_class="57",${LABELS}}`), 2);
  assert.equal(value(`users_pipeline_db_errors_total{sqlstate_class="08",${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_db_errors_total{sqlstate_class="none",${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_redis_errors_total{${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_dependency_outage{dependency="postgres",${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_dependency_outage{dependency="redis",${LABELS}}`), 0);
  metrics.onEvent({ event: "outage_ended", dependency: "postgres", ms: 10, failures: 4 });
  assert.equal(
    (await scrape(metrics)).value(
      `users_pipeline_dependency_outage{dependency="postgres",${LABELS}}`,
    ),
    0,
  );
});

Deno.test("ConsumerMetrics reads the queue's numbers once per scrape", async () => {
  let reads = 0;
  const metrics = new ConsumerMetrics({
    replica: "consumer-1",
    processMetrics: false,
    queueStats: () => {
      reads++;
      return Promise.resolve(STATS);
    },
  });
  const { text, value } = await scrape(metrics);
  assert.equal(reads, 1);
  assert.equal(value(`users_pipeline_queue_stats_up{${LABELS}}`), 1);
  assert.equal(value(`users_pipeline_queue_depth{state="queued",${LABELS}}`), 120);
  assert.equal(value(`users_pipeline_queue_depth{state="processing",${LABELS}}`), 1_000);
  assert.equal(value(`users_pipeline_queue_depth{state="dead",${LABELS}}`), 3);
  assert.equal(value(`users_pipeline_queue_oldest_age_seconds{state="queued",${LABELS}}`), 42.5);
  // The retry list's oldest item is not an envelope: its age is unknown, so not exported.
  assert.ok(!text.includes('queue_oldest_age_seconds{state="retry"'));
  await scrape(metrics);
  assert.equal(reads, 2);
});

Deno.test("ConsumerMetrics leaves the queue's gauges out, and still answers, while Redis fails or hangs", async () => {
  let answer: () => Promise<QueueStats> = () => Promise.resolve(STATS);
  const metrics = new ConsumerMetrics({
    replica: "consumer-1",
    processMetrics: false,
    queueStats: () => answer(),
    queueStatsTimeoutMs: 20,
  });
  assert.equal((await scrape(metrics)).value(`users_pipeline_queue_stats_up{${LABELS}}`), 1);
  for (
    const failing of [
      () => Promise.reject(new Error("Connection is closed.")),
      () => new Promise<QueueStats>(() => {}),
    ]
  ) {
    answer = failing;
    const { text, value } = await scrape(metrics);
    assert.equal(value(`users_pipeline_queue_stats_up{${LABELS}}`), 0);
    assert.ok(!/^users_pipeline_queue_depth\{/m.test(text), "a stale depth was exported");
    assert.ok(!/^users_pipeline_queue_oldest_age_seconds\{/m.test(text), "a stale age");
    assert.equal(value(`users_pipeline_users_stored_total{${LABELS}}`), 0);
  }
});

Deno.test("sqlstateClass() is a SQLSTATE's first two characters, or none", () => {
  assert.equal(sqlstateClass(Object.assign(new Error(), { code: "57P01" })), "57");
  assert.equal(sqlstateClass(Object.assign(new Error(), { code: "ECONNREFUSED" })), "none");
  assert.equal(sqlstateClass(new Error("timeout")), "none");
  assert.equal(sqlstateClass(null), "none");
});
