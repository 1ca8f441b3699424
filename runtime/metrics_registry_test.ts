import assert from "node:assert/strict";
import { Counter } from "prom-client";
import { createRegistry, metricsResponse } from "./metrics_registry.ts";

Deno.test("createRegistry() labels every series with the service and the replica", async () => {
  const registry = createRegistry({
    service: "server",
    replica: "server-1",
    processMetrics: false,
  });
  new Counter({ name: "users_pipeline_things_total", help: "Things.", registers: [registry] })
    .inc();
  assert.match(
    await registry.metrics(),
    /^users_pipeline_things_total\{service="server",replica="server-1"\} 1$/m,
  );
});

Deno.test("createRegistry() adds the process metrics that hold under Deno, and no others", async () => {
  const registry = createRegistry({ service: "server-consumer", replica: "r" });
  const text = await registry.metrics();
  const names = new Set(
    text.split("\n").filter((line) => line.startsWith("# TYPE ")).map((line) => line.split(" ")[2]),
  );
  for (
    const name of [
      "process_cpu_seconds_total",
      "process_start_time_seconds",
      "process_resident_memory_bytes",
      "nodejs_heap_size_used_bytes",
    ]
  ) {
    assert.ok(names.has(name), `${name} is missing`);
  }
  for (
    const name of ["nodejs_eventloop_lag_seconds", "process_open_fds", "nodejs_gc_duration_seconds"]
  ) {
    assert.ok(!names.has(name), `${name} is wrong under Deno yet exported`);
  }
  const rss = /^process_resident_memory_bytes\{[^}]*\} (\d+)$/m.exec(text)?.[1];
  assert.ok(Number(rss) > 0, `resident memory is ${rss}`);
});

Deno.test("metricsResponse() answers the text format with Prometheus' content type", async () => {
  const registry = createRegistry({ service: "s", replica: "r", processMetrics: false });
  const res = await metricsResponse(registry);
  assert.equal(res.headers.get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  assert.equal(await res.text(), "\n");
});
