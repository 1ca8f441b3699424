import assert from "node:assert/strict";
import { Histogram, Registry } from "prom-client";
import { BucketedHistogram } from "./bucketed_histogram.ts";

const BUCKETS = [0.001, 0.01, 0.1, 1];
const OBSERVED = [0, 0.0005, 0.001, 0.002, 0.05, 0.5, 1, 3, 0.01];

Deno.test("BucketedHistogram exposes what prom-client's Histogram exposes for the same observations", async () => {
  const ours = new Registry();
  const theirs = new Registry();
  for (const registry of [ours, theirs]) registry.setDefaultLabels({ service: "server" });
  const bucketed = new BucketedHistogram({
    name: "d_seconds",
    help: "Durations.",
    buckets: BUCKETS,
    registers: [ours],
  });
  const reference = new Histogram({
    name: "d_seconds",
    help: "Durations.",
    labelNames: ["method", "status"],
    buckets: BUCKETS,
    registers: [theirs],
  });
  const posts = bucketed.series({ method: "POST", status: "202" });
  const gets = bucketed.series({ method: "GET", status: "200" });
  for (const value of OBSERVED) {
    posts.observe(value);
    reference.observe({ method: "POST", status: "202" }, value);
  }
  gets.observe(0.2);
  reference.observe({ method: "GET", status: "200" }, 0.2);

  assert.equal(await ours.metrics(), await theirs.metrics());
  // Exemplars, which prom-client lists as null or undefined, are not kept.
  const samples = async (registry: Registry) =>
    (await registry.getSingleMetric("d_seconds")?.get())?.values.map((sample) => ({
      labels: sample.labels,
      value: sample.value,
      metricName: (sample as { metricName?: string }).metricName,
    }));
  assert.deepEqual(await samples(ours), await samples(theirs));
});

Deno.test("BucketedHistogram.reset() empties every series", async () => {
  const registry = new Registry();
  const histogram = new BucketedHistogram({
    name: "d_seconds",
    help: "Durations.",
    buckets: BUCKETS,
    registers: [registry],
  });
  histogram.series({ route: "/users" }).observe(0.5);
  histogram.reset();
  assert.match(await registry.metrics(), /^d_seconds_count\{route="\/users"\} 0$/m);
  assert.match(await registry.metrics(), /^d_seconds_bucket\{le="\+Inf",route="\/users"\} 0$/m);
});

Deno.test("BucketedHistogram refuses buckets that do not ascend", () => {
  assert.throws(
    () => new BucketedHistogram({ name: "d", help: "d", buckets: [1, 0.5], registers: [] }),
    RangeError,
  );
});
