import assert from "node:assert/strict";
import { FRONT_TARGETS, frontMicrosPerRequest, type FrontRun } from "./through_traefik.ts";

const run = (requestsPerSecond: number, traefik: number) =>
  ({
    requestsPerSecond,
    cores: { generator: 0.1, traefik, api: 0.5, redis: 0.05 },
  }) as unknown as FrontRun;

Deno.test("frontMicrosPerRequest() is a process's CPU time over requests, in µs, median over runs", () => {
  const runs = [run(5_000, 0.5), run(4_000, 0.2), run(10_000, 0.6)];
  // 100, 50 and 60 µs: the median is 60.
  assert.ok(Math.abs(frontMicrosPerRequest(runs, "traefik") - 60) < 1e-9);
  assert.ok(Math.abs(frontMicrosPerRequest([run(5_000, 0.5)], "api") - 100) < 1e-9);
});

Deno.test("the traefik phase measures the ceiling first, then ours next to the course's", () => {
  assert.deepEqual(FRONT_TARGETS, ["ceiling", "queue", "course"]);
});
