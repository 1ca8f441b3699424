import assert from "node:assert/strict";
import { backoffDelay, Outage, type OutageEvent } from "./backoff.ts";

Deno.test("backoffDelay() doubles its ceiling per attempt up to the cap", () => {
  const top = () => 1;
  assert.deepEqual(
    [0, 1, 2, 3].map((n) => backoffDelay(n, { baseMs: 100, maxMs: 500, random: top })),
    [
      100,
      200,
      400,
      500,
    ],
  );
  assert.equal(backoffDelay(1_000, { baseMs: 100, maxMs: 500, random: top }), 500);
  assert.equal(backoffDelay(3, { baseMs: 100, random: () => 0 }), 0);
});

Deno.test("Outage reports once when failures start and once when they end", () => {
  const events: OutageEvent[] = [];
  let now = 1_000;
  const outage = new Outage("postgres", { onEvent: (event) => events.push(event), now: () => now });
  const refused = new Error("connection refused");
  outage.succeeded();
  outage.failed(refused);
  now += 700;
  outage.failed(refused);
  assert.equal(outage.failures, 2);
  outage.succeeded();
  assert.equal(outage.failures, 0);
  assert.deepEqual(events, [
    { event: "outage_started", dependency: "postgres", error: refused },
    { event: "outage_ended", dependency: "postgres", ms: 700, failures: 2 },
  ]);
});
