import assert from "node:assert/strict";
import { isSustained, ladderRates, openConnections, type RateRun } from "./end_to_end.ts";

Deno.test("ladderRates() takes fractions of the ceiling, rounded to 50 req/s, once each", () => {
  assert.deepEqual(ladderRates(9_130, [0.125, 0.25, 0.5, 0.75, 1]), [
    1_150,
    2_300,
    4_550,
    6_850,
    9_150,
  ]);
  assert.deepEqual(ladderRates(9_130, [1, 0.5]), [4_550, 9_150]);
  assert.deepEqual(ladderRates(60, [0.1, 0.2, 1]), [50]);
});

Deno.test("openConnections() allows 50 ms per request in flight, within 64 and 1000", () => {
  assert.equal(openConnections(500), 64);
  assert.equal(openConnections(10_000), 500);
  assert.equal(openConnections(100_000), 1_000);
});

Deno.test("isSustained() wants what was asked mostly sent, then accepted and stored", () => {
  const base: Omit<RateRun, "sustained"> = {
    offered: 1_000,
    load: {
      requests: 10_000,
      accepted: 10_000,
      rejected: 0,
      failed: 0,
      dropped: 0,
      seconds: 10,
      latencyMs: { p50: 1, p90: 2, p99: 3 },
      slowestMs: 4,
    },
    acceptedPerSecond: 1_000,
    storedPerSecond: 995,
    maxBacklog: 10,
    endBacklog: 0,
    latencyMs: { p50: 5, p99: 20, max: 40 },
    stored: 10_000,
    refusals: {
      total: 0,
      traefik: 0,
      api: { full: 0, unavailable: 0, unconfirmed: 0 },
      unexplained: 0,
    },
    cores: { generator: 0, traefik: 0, api: 0, consumers: 0, redis: 0, postgres: 0, machine: 0 },
  };
  assert.equal(isSustained(base, 10), true);
  // A paced generator slips a handful behind its schedule: 1% unsent is still sustained.
  const late = { ...base, load: { ...base.load, requests: 9_900, accepted: 9_900, dropped: 100 } };
  assert.equal(isSustained(late, 10), true);
  const tooLate = {
    ...base,
    load: { ...base.load, requests: 9_899, accepted: 9_899, dropped: 101 },
  };
  assert.equal(isSustained(tooLate, 10), false);
  assert.equal(isSustained({ ...base, load: { ...base.load, accepted: 9_800 } }, 10), false);
  assert.equal(isSustained({ ...base, storedPerSecond: 900 }, 10), false);
});
