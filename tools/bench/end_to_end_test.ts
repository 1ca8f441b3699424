import assert from "node:assert/strict";
import { isSustained, nextRate, type RateRun } from "./end_to_end.ts";

const plan = { startRate: 250, maxRate: 8_000 };
const run = (offered: number, sustained: boolean) => ({ offered, sustained });

Deno.test("nextRate() doubles while sustained, tries one midpoint, then stops", () => {
  assert.equal(nextRate([], plan), 250);
  assert.equal(nextRate([run(250, true), run(500, true)], plan), 1_000);
  const failedAt2000 = [run(250, true), run(500, true), run(1_000, true), run(2_000, false)];
  assert.equal(nextRate(failedAt2000, plan), 1_500);
  assert.equal(nextRate([...failedAt2000, run(1_500, true)], plan), undefined);
  assert.equal(nextRate([...failedAt2000, run(1_500, false)], plan), undefined);
});

Deno.test("nextRate() stops at the maximum rate and after a first rate that fails", () => {
  const all = [250, 500, 1_000, 2_000, 4_000, 8_000].map((rate) => run(rate, true));
  assert.equal(nextRate(all, plan), undefined);
  assert.equal(nextRate([run(250, false)], plan), undefined);
});

Deno.test("isSustained() wants what was asked mostly sent, then accepted and stored", () => {
  const base: Omit<RateRun, "sustained"> = {
    offered: 1_000,
    k6: {
      requests: 10_000,
      accepted: 10_000,
      rejected: 0,
      failed: 0,
      dropped: 0,
      seconds: 10,
      latencyMs: { p50: 1, p90: 2, p99: 3 },
    },
    acceptedPerSecond: 1_000,
    storedPerSecond: 995,
    maxBacklog: 10,
    endBacklog: 0,
    latencyMs: { p50: 5, p99: 20, max: 40 },
    stored: 10_000,
    cores: { k6: 0, traefik: 0, api: 0, consumers: 0, redis: 0, postgres: 0, machine: 0 },
  };
  assert.equal(isSustained(base, 10), true);
  // k6 starting 2% of the iterations late is the load generator's limit, not the stack's.
  const late = { ...base, k6: { ...base.k6, requests: 9_800, accepted: 9_800, dropped: 200 } };
  assert.equal(isSustained(late, 10), true);
  const tooLate = { ...base, k6: { ...base.k6, requests: 9_000, accepted: 9_000, dropped: 1_000 } };
  assert.equal(isSustained(tooLate, 10), false);
  assert.equal(isSustained({ ...base, k6: { ...base.k6, accepted: 9_800 } }, 10), false);
  assert.equal(isSustained({ ...base, storedPerSecond: 900 }, 10), false);
});
