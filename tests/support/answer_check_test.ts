import assert from "node:assert/strict";
import {
  checkAnswers,
  excuseFor,
  type Fault,
  QUEUE_FULL,
  QUEUE_UNAVAILABLE,
  QUEUE_UNCONFIRMED,
} from "./answer_check.ts";
import { ERROR_CODE_HEADER, NO_REPLICA_READY } from "@users-pipeline/server/api_error";
import { classify, type Outcome } from "./fault_load.ts";

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
  outcome({
    kind: "rejected",
    status: 503,
    code: QUEUE_UNAVAILABLE,
    detail: "queue is unavailable, retry later",
    retryAfter: "1",
    sentAt,
  });
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
  assert.match(report.problems[0]!, /^2 × 503 queue_unavailable "queue is unavailable.*outside/);
});

Deno.test("checkAnswers() reports a 503 that only another kind of fault explains", () => {
  const full = outcome({ kind: "rejected", status: 503, code: QUEUE_FULL, sentAt: 2_500 });
  const report = checkAnswers([full], [redisDown]);
  assert.match(report.problems[0]!, /^1 × 503 queue_full /);
});

Deno.test("checkAnswers() never explains a 4xx or another 503 to a valid request", () => {
  const everything: Fault = { ...redisDown, excuses: ["full", "unavailable", "cut"] };
  const report = checkAnswers(
    [
      outcome({ kind: "rejected", status: 400, code: "invalid_body", sentAt: 2_500 }),
      outcome({ kind: "rejected", status: 503, code: "database_unavailable", sentAt: 2_500 }),
    ],
    [everything],
  );
  assert.equal(report.problems.length, 2);
  assert.ok(report.problems.every((p) => p.includes("to a valid request")), report.problems[0]);
});

Deno.test("checkAnswers() never explains an answer the contract forbids, even inside a fault", () => {
  const everything: Fault = { ...redisDown, excuses: ["full", "unavailable", "cut"] };
  // A 503 queue_unavailable without Retry-After: its code alone would name the Redis outage.
  const noRetryAfter = outcome({
    kind: "unexpected",
    status: 503,
    code: QUEUE_UNAVAILABLE,
    detail: '503 {"code":"queue_unavailable"}',
    sentAt: 2_500,
  });
  const internal = outcome({ kind: "unexpected", status: 500, detail: "500 boom", sentAt: 2_500 });
  assert.equal(excuseFor(noRetryAfter), undefined);
  const report = checkAnswers([noRetryAfter, internal], [everything]);
  assert.deepEqual(report.problems.map((p) => p.replace(/ \(e\.g\. .*/, "")), [
    '1 × answer the contract forbids: 503 {"code":"queue_unavailable"}',
    "1 × answer the contract forbids: 500 boom",
  ]);
  assert.equal(report.explained.size, 0);
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

Deno.test("checkAnswers() explains Traefik's no_replica_ready only inside a fault that names it", () => {
  const traefik = (sentAt: number) =>
    outcome({ kind: "rejected", status: 503, code: NO_REPLICA_READY, retryAfter: "1", sentAt });
  const restart: Fault = {
    what: "APIs restarting",
    from: 2_000,
    to: 3_000,
    excuses: ["no_replica"],
  };
  assert.deepEqual(checkAnswers([traefik(2_500)], [restart]).problems, []);
  const outside = checkAnswers([traefik(5_000)], [restart]);
  assert.match(outside.problems[0]!, /^1 × 503 no_replica_ready .* outside any fault/);
  assert.equal(checkAnswers([traefik(2_500)], [redisDown]).problems.length, 1);
});

Deno.test("checkAnswers() holds every answer to answerWithinMs, plus the allowance of a fault it overlaps", () => {
  const slow202 = outcome({ kind: "accepted", status: 202, id: "1", sentAt: 1_000, ms: 1_600 });
  const quick202 = outcome({ kind: "accepted", status: 202, id: "2", sentAt: 1_000, ms: 900 });
  const bound = { answerWithinMs: 1_500 };
  assert.deepEqual(checkAnswers([quick202], [], bound).problems, []);
  const late = checkAnswers([slow202, quick202], [], bound);
  assert.match(late.problems[0]!, /^1 × answer slower than 1500 ms/);
  const retrying: Fault = {
    what: "API killed",
    from: 2_000,
    to: 2_500,
    excuses: ["cut"],
    slowerByMs: 500,
  };
  assert.deepEqual(checkAnswers([slow202], [retrying], bound).problems, []);
  // The allowance is the fault's, so an answer that does not overlap it has none.
  const elsewhere = { ...retrying, from: 5_000, to: 6_000 };
  assert.equal(checkAnswers([slow202], [elsewhere], bound).problems.length, 1);
});

Deno.test("checkAnswers() explains an unconfirmed push only inside a failover that names it", () => {
  const unconfirmed = (sentAt: number) =>
    outcome({ kind: "rejected", status: 503, code: QUEUE_UNCONFIRMED, retryAfter: "1", sentAt });
  const failover: Fault = {
    what: "master SIGKILLed",
    from: 2_000,
    to: 3_000,
    excuses: ["unavailable", "unconfirmed"],
  };
  assert.deepEqual(checkAnswers([unconfirmed(2_500)], [failover]).problems, []);
  const outside = checkAnswers([unconfirmed(1_000), unconfirmed(4_000)], [failover]);
  assert.match(outside.problems[0]!, /^2 × 503 unconfirmed .* outside any fault/);
  // A Redis outage explains a 503 queue_unavailable, not an unconfirmed push.
  assert.match(
    checkAnswers([unconfirmed(2_500)], [redisDown]).problems[0]!,
    /^1 × 503 unconfirmed /,
  );
});

Deno.test("checkAnswers() holds each answer to its own bound when given one per answer", () => {
  const fast = "http://127.0.0.1:2";
  const bounds = new Map([[url, 600], [fast, 300]]);
  const answerWithinMs = (o: Outcome) => bounds.get(o.url)!;
  const within = outcome({ kind: "accepted", status: 202, id: "1", ms: 500 });
  const late = outcome({ kind: "accepted", status: 202, id: "2", ms: 500, url: fast });
  const { problems } = checkAnswers([within, late], [], { answerWithinMs });
  assert.equal(problems.length, 1);
  assert.match(problems[0]!, /^1 × answer slower than 300 ms .*user-\d+ sent at 1000, 500 ms/);
});

Deno.test("checkAnswers() goes by the code, whatever the message says", () => {
  const reworded = outcome({
    kind: "rejected",
    status: 503,
    code: QUEUE_UNAVAILABLE,
    detail: "Redis did not answer, try again",
    sentAt: 2_500,
  });
  const misleading = outcome({
    kind: "rejected",
    status: 503,
    code: "unconfirmed",
    detail: "queue is unavailable, retry later",
    sentAt: 2_500,
  });
  const report = checkAnswers([reworded, misleading], [redisDown]);
  assert.equal(report.explained.get("Redis down"), 1);
  assert.equal(report.problems.length, 1);
  assert.match(report.problems[0]!, /^1 × 503 unconfirmed /);
});

Deno.test("classify() reads the API's code from its body and Traefik's from X-Error-Code", async () => {
  const api = await classify(
    "a",
    url,
    Date.now(),
    Response.json({ error: "queue is full, retry later", code: "queue_full" }, {
      status: 503,
      headers: { "Retry-After": "1" },
    }),
  );
  assert.equal(api.kind, "rejected");
  assert.equal(api.code, QUEUE_FULL);
  assert.equal(api.detail, "queue is full, retry later");
  const traefik = await classify(
    "b",
    url,
    Date.now(),
    new Response("no available server\n", {
      status: 503,
      headers: { "Retry-After": "1", [ERROR_CODE_HEADER]: NO_REPLICA_READY },
    }),
  );
  assert.equal(traefik.kind, "rejected");
  assert.equal(traefik.code, NO_REPLICA_READY);
  assert.equal(traefik.detail, "no available server");
});

Deno.test("classify() holds a refusal without a code, or a 503 without Retry-After, unexpected", async () => {
  const answers = [
    Response.json({ error: "queue is full, retry later" }, {
      status: 503,
      headers: { "Retry-After": "1" },
    }),
    new Response("no available server", { status: 503, headers: { "Retry-After": "1" } }),
    Response.json({ error: "queue is full, retry later", code: "queue_full" }, { status: 503 }),
    Response.json({ error: "internal error", code: "internal_error" }, { status: 500 }),
  ];
  for (const answer of answers) {
    const outcome = await classify("c", url, Date.now(), answer);
    assert.equal(outcome.kind, "unexpected", outcome.detail);
  }
});

/** An id of the API's shape (UUIDv7) whose millisecond is `ms`: `shardOf` puts it in `ms % K`. */
const idAt = (ms: number) => {
  const hex = ms.toString(16).padStart(12, "0");
  return `${hex.slice(0, 8)}-${hex.slice(8)}-7000-8000-000000000000`;
};
/** A master of a cluster of 3 shards failing: shard 1 is its. */
const masterDown: Fault = {
  what: "master of shard 1 SIGKILLed",
  from: 2_000,
  to: 3_000,
  excuses: ["unavailable", "unconfirmed", "cut"],
  shards: { of: new Set([1]), count: 3 },
};

Deno.test("checkAnswers() explains a 503 by a fault of some shards only if the id it names is of one", () => {
  const unconfirmed = (id: string) =>
    outcome({ kind: "rejected", status: 503, code: QUEUE_UNCONFIRMED, id, sentAt: 2_500 });
  const report = checkAnswers(
    [
      { ...unavailable(2_500), id: idAt(4) },
      unconfirmed(idAt(7)),
      { ...unavailable(2_500), id: idAt(5) },
      unconfirmed(idAt(3)),
    ],
    [masterDown],
  );
  assert.equal(report.explained.get(masterDown.what), 2);
  assert.equal(report.problems.length, 2, report.problems.join("\n"));
  assert.match(report.problems[0]!, /^1 × 503 queue_unavailable .*outside any fault/);
  assert.match(report.problems[1]!, /^1 × 503 unconfirmed .*outside any fault/);
});

Deno.test("checkAnswers() explains no answer without an id by a fault of some shards", () => {
  const cut = outcome({ kind: "indeterminate", detail: "connection reset", sentAt: 2_500 });
  const noId = { ...unavailable(2_500), id: undefined };
  const scoped = checkAnswers([cut, noId], [masterDown], { maxIndeterminate: 1 });
  assert.equal(scoped.problems.length, 2, scoped.problems.join("\n"));
  assert.match(scoped.problems[0]!, /^1 × connection cut .* outside any API kill/);
  const { shards: _, ...everyShard } = masterDown;
  const unscoped = checkAnswers([cut, noId], [everyShard], { maxIndeterminate: 1 });
  assert.deepEqual(unscoped.problems, []);
});

Deno.test("checkAnswers() gives a fault's slowerByMs only to the answers of its shards", () => {
  const slow = (id: string) =>
    outcome({ kind: "accepted", status: 202, id, sentAt: 2_500, ms: 900 });
  const report = checkAnswers(
    [slow(idAt(4)), slow(idAt(5))],
    [{ ...masterDown, slowerByMs: 500 }],
    { answerWithinMs: 500 },
  );
  assert.equal(report.problems.length, 1, report.problems.join("\n"));
  assert.match(
    report.problems[0]!,
    /^1 × answer slower than 500 ms .*user-\d+ sent at 2500, 900 ms\)$/,
  );
});
