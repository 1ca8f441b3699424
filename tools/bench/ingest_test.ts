import assert from "node:assert/strict";
import {
  apiAndRedisMicrosPerRequest,
  cpuMicrosPerRequest,
  INGEST_TARGETS,
  median,
  pairedRatio,
  shareOfFloor,
} from "./ingest.ts";
import { quickResultsWithComparisons } from "./testdata/fixtures.ts";

const rps = (...values: number[]) => values.map((requestsPerSecond) => ({ requestsPerSecond }));

Deno.test("median() takes the middle value, or the mean of the middle two", () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.ok(Number.isNaN(median([])));
});

Deno.test("pairedRatio() is the median of the per-round ratios, not the ratio of medians", () => {
  // Round 2 is slow for both: paired, it is as good a round as the others.
  assert.equal(pairedRatio(rps(100, 50, 120), rps(100, 50, 100)), 1);
  assert.equal(pairedRatio(rps(90, 40, 60), rps(100, 50, 100)), 0.8);
  // A round one side lacks (an interrupted run) is left out.
  assert.equal(pairedRatio(rps(90, 80), rps(100)), 0.9);
  assert.ok(Number.isNaN(pairedRatio([], rps(100))));
});

Deno.test("the ingest rounds measure queue mode next to the floor and the course's, direct mode last", () => {
  assert.deepEqual(INGEST_TARGETS, ["floor", "queue", "course", "no_redis", "direct"]);
});

Deno.test("shareOfFloor() reads each target against the HTTP floor", async () => {
  const results = await quickResultsWithComparisons({ course: 1.25 });
  const ingest = results.ingest!;
  assert.equal(shareOfFloor(ingest, "floor"), 1);
  assert.equal(shareOfFloor(ingest, "queue"), ingest.queueRatio);
  assert.equal(shareOfFloor(ingest, "direct"), ingest.directRatio);
  assert.equal(
    shareOfFloor(ingest, "no_redis"),
    pairedRatio(ingest.runs.no_redis, ingest.runs.floor),
  );
  // Queue is 1.25× the course, so the course is queue's share divided by 1.25.
  const queueShare = pairedRatio(ingest.runs.queue, ingest.runs.floor);
  assert.ok(Math.abs(shareOfFloor(ingest, "course") - queueShare / 1.25) < 1e-9);
});

Deno.test("cpuMicrosPerRequest() is CPU time over requests, in µs, median over runs", () => {
  const run = (serverCores: number, redisCores: number, requestsPerSecond: number) =>
    ({ serverCores, redisCores, requestsPerSecond }) as Parameters<
      typeof cpuMicrosPerRequest
    >[0][number];
  const runs = [run(0.9, 0.3, 30_000), run(1, 0.2, 20_000), run(0.8, 0.4, 40_000)];
  assert.equal(cpuMicrosPerRequest(runs, "serverCores"), 30);
  assert.equal(cpuMicrosPerRequest(runs, "redisCores"), 10);
});

Deno.test("apiAndRedisMicrosPerRequest() counts the server's and Redis's CPU together", () => {
  const run = (serverCores: number, redisCores: number, requestsPerSecond: number) =>
    ({ serverCores, redisCores, requestsPerSecond }) as Parameters<
      typeof apiAndRedisMicrosPerRequest
    >[0][number];
  // 40, 60 and 30 µs per request: the median is 40, whichever process spent it.
  const runs = [run(0.6, 0.2, 20_000), run(0.3, 0.9, 20_000), run(0.9, 0.3, 40_000)];
  assert.equal(apiAndRedisMicrosPerRequest(runs), 40);
});
