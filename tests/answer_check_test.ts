import assert from "node:assert/strict";
import {
  checkAnswers,
  type Fault,
  holdTooSlowAsIndeterminate,
  QUEUE_FULL,
  QUEUE_UNAVAILABLE,
} from "./answer_check.ts";
import type { Outcome } from "./fault_load.ts";

const url = "http://127.0.0.1:1";
let counter = 0;
const outcome = (fields: Partial<Outcome> & Pick<Outcome, "kind">): Outcome => ({
  name: `user-${++counter}`,
  url,
  sentAt: 1_000,
  ms: 10,
  ...fields,
});
const unavailable = (sentAt: number) =>
  outcome({ kind: "rejected", status: 503, detail: QUEUE_UNAVAILABLE, retryAfter: "1", sentAt });
const redisDown: Fault = { what: "Redis down", from: 2_000, to: 3_000, excuses: ["unavailable"] };

Deno.test("checkAnswers() accepts 202s and answers a fault explains", () => {
  const report = checkAnswers(
    [
      outcome({ kind: "accepted", status: 202, id: "1" }),
      unavailable(1_995),
      unavailable(2_500),
      unavailable(3_000),
    ],
    [redisDown],
  );
  assert.deepEqual(report.problems, []);
  assert.equal(report.explained.get("Redis down"), 3);
});

Deno.test("checkAnswers() reports a 503 outside the fault that would explain it", () => {
  const report = checkAnswers([unavailable(1_000), unavailable(3_001)], [redisDown]);
  assert.equal(report.problems.length, 1);
  assert.match(report.problems[0]!, /^2 × 503 "queue is unavailable.*outside any fault/);
});

Deno.test("checkAnswers() reports a 503 that only another kind of fault explains", () => {
  const full = outcome({ kind: "rejected", status: 503, detail: QUEUE_FULL, sentAt: 2_500 });
  const report = checkAnswers([full], [redisDown]);
  assert.match(report.problems[0]!, /^1 × 503 "queue is full/);
});

Deno.test("checkAnswers() never explains a 4xx or another 503 to a valid request", () => {
  const everything: Fault = { ...redisDown, excuses: ["full", "unavailable", "cut"] };
  const report = checkAnswers(
    [
      outcome({ kind: "rejected", status: 400, detail: "name must be a string", sentAt: 2_500 }),
      outcome({ kind: "rejected", status: 503, detail: "database is down", sentAt: 2_500 }),
    ],
    [everything],
  );
  assert.equal(report.problems.length, 2);
  assert.ok(report.problems.every((p) => p.includes("to a valid request")), report.problems[0]);
});

Deno.test("checkAnswers() never explains a hang, even inside a fault", () => {
  const everything: Fault = { ...redisDown, excuses: ["full", "unavailable", "cut"] };
  const hung = outcome({
    kind: "indeterminate",
    detail: "TimeoutError: no answer within 10000 ms",
    timedOut: true,
    sentAt: 2_500,
    ms: 10_000,
  });
  const report = checkAnswers([hung], [everything], { maxIndeterminate: 5 });
  assert.equal(report.problems.length, 1);
  assert.match(report.problems[0]!, /^1 × no answer within the load's timeout \(a hang\)/);
});

Deno.test("checkAnswers() bounds cut connections by the kill windows and the count", () => {
  const killed: Fault = { what: "API killed", from: 2_000, to: 2_100, excuses: ["cut"] };
  const cut = (sentAt: number) =>
    outcome({ kind: "indeterminate", detail: "TypeError: fetch failed", sentAt });
  const inside = [cut(1_995), cut(2_050)];
  assert.deepEqual(checkAnswers(inside, [killed], { maxIndeterminate: 2 }).problems, []);
  assert.deepEqual(checkAnswers(inside, [killed]).problems, [
    "2 indeterminate answers where at most 0 may be",
  ]);
  const outside = checkAnswers([cut(5_000)], [killed], { maxIndeterminate: 1 });
  assert.match(outside.problems[0]!, /^1 × connection cut .* outside any API kill or stop/);
});

Deno.test("holdTooSlowAsIndeterminate() turns only the too-slow 503s indeterminate, within a bound", () => {
  const accepted = outcome({ kind: "accepted", status: 202, id: "1" });
  const full = outcome({ kind: "rejected", status: 503, detail: QUEUE_FULL, retryAfter: "1" });
  const slow = unavailable(1_000);
  const held = holdTooSlowAsIndeterminate([accepted, full, slow], 0.5);
  assert.deepEqual(held.outcomes.map((o) => o.kind), ["accepted", "rejected", "indeterminate"]);
  assert.deepEqual(held.tooSlow.map((o) => o.name), [slow.name]);
  assert.equal(held.problem, undefined);
  const over = holdTooSlowAsIndeterminate([accepted, slow, unavailable(1_001)], 0.5);
  assert.equal(over.tooSlow.length, 2);
  assert.equal(over.problem, "2 of 3 answered 503 as the queue was too slow, more than 50%");
});
