import assert from "node:assert/strict";
import { parseK6Summary } from "./k6.ts";

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
});

Deno.test("parseK6Summary() refuses a summary without requests", () => {
  assert.throws(() => parseK6Summary('{"metrics": {}}'), /lacks http_reqs/);
});
