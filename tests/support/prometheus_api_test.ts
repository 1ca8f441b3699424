import assert from "node:assert/strict";
import { parseTargets, parseVector, targetHealth } from "./prometheus_api.ts";

Deno.test("parseTargets() and targetHealth() count each job's targets up and not up", () => {
  const target = (job: string, instance: string, health: string, lastError = "") => ({
    discoveredLabels: {},
    labels: { instance, job },
    scrapePool: job,
    health,
    lastError,
  });
  const targets = parseTargets({
    activeTargets: [
      target("server", "10.0.0.2:8000", "up"),
      target("server", "10.0.0.3:8000", "down", "connection refused"),
      target("server-consumer", "10.0.0.4:8000", "unknown"),
      target("server-consumer", "10.0.0.5:8000", "up"),
    ],
    droppedTargets: [],
  });
  assert.deepEqual(targets[1], {
    job: "server",
    instance: "10.0.0.3:8000",
    health: "down",
    lastError: "connection refused",
  });
  assert.deepEqual(targetHealth(targets), {
    server: { up: 1, down: 1 },
    "server-consumer": { up: 1, down: 1 },
  });
  assert.deepEqual(parseTargets({}), []);
});

Deno.test("parseVector() reads each sample's labels and value, and refuses a non-vector", () => {
  const samples = parseVector({
    resultType: "vector",
    result: [{ metric: { replica: "consumer-1" }, value: [1700000000.5, "42"] }],
  });
  assert.deepEqual(samples, [{ labels: { replica: "consumer-1" }, value: 42 }]);
  assert.throws(() => parseVector({ resultType: "matrix", result: [] }), {
    name: "TypeError",
    message: /current value is matrix$/,
  });
});
