import assert from "node:assert/strict";
import { arrivalVUs, parseK6Summary } from "./k6.ts";

Deno.test("arrivalVUs() never pre-allocates more VUs than the run may use", () => {
  assert.deepEqual(arrivalVUs(1_000), { preAllocated: 50, max: 500 });
  assert.deepEqual(arrivalVUs(100), { preAllocated: 20, max: 100 });
  // The overload phase: 4,099 req/s with at most 200 VUs (k6 exited 104 on 205 of 200).
  assert.deepEqual(arrivalVUs(4_099, { maxVUs: 200 }), { preAllocated: 200, max: 200 });
});

Deno.test("parseK6Summary() reads a captured summary of post_users_k6.js", async () => {
  const json = await Deno.readTextFile(new URL("./testdata/k6_summary.json", import.meta.url));
  const result = parseK6Summary(json);
  assert.equal(result.requests, 6_812);
  assert.equal(result.accepted, 6_812);
  assert.equal(result.rejected, 0);
  assert.equal(result.failed, 0);
  assert.equal(result.dropped, 1_189);
  assert.equal(result.seconds, 4.001000823);
  assert.equal(result.latencyMs.p50, 2.6280574999999997);
  assert.equal(result.latencyMs.p99, 109.84157891000002);
  assert.deepEqual(result.crossed, []);
});

Deno.test("parseK6Summary() refuses a summary without requests", () => {
  assert.throws(() => parseK6Summary('{"metrics": {}}'), /lacks http_reqs/);
});

Deno.test("parseK6Summary() lists the thresholds k6 crossed", () => {
  const summary = {
    state: { testRunDurationMs: 1_000 },
    metrics: {
      http_reqs: { values: { count: 10 } },
      http_req_duration: { values: { med: 1, "p(90)": 2, "p(99)": 3 } },
      http_req_failed: { values: { rate: 0.2 }, thresholds: { "rate==0": { ok: false } } },
      users_failed: { values: { count: 2 }, thresholds: { "count==0": { ok: false } } },
      users_accepted: { values: { count: 8 }, thresholds: {} },
    },
  };
  const result = parseK6Summary(JSON.stringify(summary));
  assert.deepEqual(result.crossed, ["http_req_failed: rate==0", "users_failed: count==0"]);
  assert.equal(result.failed, 2);
});
