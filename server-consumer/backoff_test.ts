import assert from "node:assert/strict";
import { backoffDelay, Outage } from "./backoff.ts";

Deno.test("backoffDelay() doubles its ceiling per attempt up to the cap", () => {
  const top = () => 1;
  assert.deepEqual([0, 1, 2, 3].map((n) => backoffDelay(n, { baseMs: 100, maxMs: 500 }, top)), [
    100,
    200,
    400,
    500,
  ]);
  assert.equal(backoffDelay(1_000, { baseMs: 100, maxMs: 500 }, top), 500);
  assert.equal(backoffDelay(3, { baseMs: 100 }, () => 0), 0);
});

Deno.test("Outage logs once when failures start and once when they end", () => {
  const lines: string[] = [];
  const outage = new Outage("postgres", (line) => lines.push(line));
  outage.succeeded();
  outage.failed(new Error("connection refused"));
  outage.failed(new Error("connection refused"));
  assert.equal(outage.failures, 2);
  outage.succeeded();
  assert.equal(outage.failures, 0);
  assert.equal(lines.length, 2);
  assert.match(lines[0]!, /^postgres unavailable, retrying with backoff: connection refused$/);
  assert.match(lines[1]!, /^postgres is back after \d+ ms$/);
});
