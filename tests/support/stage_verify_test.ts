import assert from "node:assert/strict";
import type { Redis } from "ioredis";
import type postgres from "postgres";
import { queueShards } from "@users-pipeline/queue";
import {
  type AnswerCheckOptions,
  checkAnswers,
  type Fault,
  QUEUE_FULL,
  QUEUE_UNAVAILABLE,
  QUEUE_UNCONFIRMED,
} from "./answer_check.ts";
import type { Outcome } from "./fault_load.ts";
import { RetryingClient } from "./retrying_client.ts";
import {
  accounting,
  inLossWindow,
  matchDeadLetters,
  pushMayHaveRun,
  type StageReport,
  type Verifiable,
  verifyDelivery,
} from "./stage_verify.ts";

const outcome = (fields: Partial<Outcome> & Pick<Outcome, "kind">): Outcome => ({
  name: "user",
  url: "http://127.0.0.1:1",
  sentAt: 1_000,
  ms: 10,
  ...fields,
});

Deno.test("matchDeadLetters() lets each expected or maybe payload account for one letter", () => {
  assert.deepEqual(matchDeadLetters(["a", "b", "b", "c"], ["a", "b"], ["b"]), {
    unexplained: ["c"],
    missing: [],
  });
  assert.deepEqual(matchDeadLetters(["a"], ["a", "a", "x"], []), {
    unexplained: [],
    missing: ["a", "x"],
  });
  assert.deepEqual(matchDeadLetters(["m", "m"], [], ["m"]), { unexplained: ["m"], missing: [] });
});

Deno.test("pushMayHaveRun() holds for a 503 queue_unavailable or unconfirmed alone", () => {
  const rejected = (status: number, code: string) => outcome({ kind: "rejected", status, code });
  assert.equal(pushMayHaveRun(rejected(503, QUEUE_UNAVAILABLE)), true);
  assert.equal(pushMayHaveRun(rejected(503, QUEUE_UNCONFIRMED)), true);
  assert.equal(pushMayHaveRun(rejected(503, QUEUE_FULL)), false);
  assert.equal(pushMayHaveRun(outcome({ kind: "accepted", status: 202 })), false);
});

Deno.test("inLossWindow() holds for a 202 that overlapped the window in one of its shards", () => {
  const shards = queueShards("q", { shards: 2, cluster: true });
  // shardOf() reads the id's first 48 bits: ...0 is shard 0, ...1 shard 1.
  const id = (shard: number) => `00000000-000${shard}-7000-8000-000000000000`;
  const window = { from: 2_000, to: 3_000, shards: new Set([1]) };
  const accepted = (sentAt: number, ms: number, shard: number) =>
    outcome({ kind: "accepted", status: 202, id: id(shard), sentAt, ms });
  assert.equal(inLossWindow(accepted(1_900, 200, 1), window, shards), true, "answered inside");
  assert.equal(inLossWindow(accepted(3_000, 5, 1), window, shards), true, "sent at the kill");
  assert.equal(inLossWindow(accepted(1_900, 50, 1), window, shards), false, "answered before");
  assert.equal(inLossWindow(accepted(3_001, 5, 1), window, shards), false, "sent after");
  assert.equal(inLossWindow(accepted(2_500, 5, 0), window, shards), false, "another shard");
  assert.equal(inLossWindow(undefined, window, shards), false);
});

Deno.test("accounting() counts refusals other than the unconfirmed apart", () => {
  const report: StageReport = {
    requests: 1_242,
    accepted: 1_200,
    rejected: 40,
    indeterminate: 2,
    indeterminateStored: 1,
    mayStoreStored: 12,
    lost: [],
    duplicated: [],
    unexpectedRows: [],
    wrongIds: [],
    unexpectedAnswers: [],
    stored: 1_213,
    unconfirmed: 35,
    unconfirmedStored: 12,
    crashCounts: 0,
  };
  assert.equal(
    accounting(report),
    "accepted 1200, stored 1213, lost 0, duplicated 0, unconfirmed 35 (12 stored), refused 5, " +
      "indeterminate 2 (1 stored), crash counts left 0",
  );
});

/**
 * A drained stage whose table holds `rows` and whose only fault is a Redis outage from 2000 to
 * 3000 ms, holding answers to 600 ms as `Stage.assertAnswers` would.
 */
function drainedStage(rows: readonly { id: string; name: string }[]): Verifiable {
  const outage: Fault = { what: "Redis down", from: 2_000, to: 3_000, excuses: ["unavailable"] };
  return {
    world: {
      redis: {
        scard: () => Promise.resolve(0),
        hlen: () => Promise.resolve(0),
      } as unknown as Redis,
      sql: (() => Promise.resolve(rows)) as unknown as postgres.Sql,
    },
    shards: queueShards("q"),
    lists: () => Promise.resolve(new Map()),
    deadLetters: () => Promise.resolve([]),
    assertRunning() {},
    assertAnswers(outcomes: readonly Outcome[], options: AnswerCheckOptions = {}) {
      const { problems } = checkAnswers(outcomes, [outage], { answerWithinMs: 600, ...options });
      assert.ok(problems.length === 0, `answers no fault explains:\n  ${problems.join("\n  ")}`);
    },
    tails: () => "",
  };
}

/** A keyed client (never started) whose one user got `tries`, the last its 202 for id "k". */
function keyedClient(tries: readonly Partial<Outcome>[]): RetryingClient {
  const client = new RetryingClient({
    urls: ["http://127.0.0.1:1"],
    prefix: "t",
    ratePerSecond: 1,
  });
  client.users.push({ key: "t-key-0", name: "t-0", id: "k", tries: tries.length, gaveUp: false });
  for (const fields of tries) client.answers.push(outcome({ name: "t-0", ...fields } as Outcome));
  return client;
}

const keyed503 = (sentAt: number) =>
  ({ kind: "rejected", status: 503, code: QUEUE_UNAVAILABLE, retryAfter: "1", sentAt }) as const;
const keyed202 = { kind: "accepted", status: 202, id: "k", sentAt: 3_500 } as const;
const rows = [{ id: "1", name: "user" }, { id: "k", name: "t-0" }];
const load = [outcome({ kind: "accepted", status: 202, id: "1" })];

Deno.test("verifyDelivery() holds with a keyed client that met the fault and then got its 202", async () => {
  const client = keyedClient([keyed503(2_500), keyed202]);
  const report = await verifyDelivery(drainedStage(rows), load, { keyed: client });
  assert.equal(report.accepted, 1);
});

Deno.test("verifyDelivery() fails a keyed try the contract forbids, though a retry got its 202", async () => {
  const internal = { kind: "unexpected", status: 500, detail: "500 boom", sentAt: 2_500 } as const;
  await assert.rejects(
    verifyDelivery(drainedStage(rows), load, { keyed: keyedClient([internal, keyed202]) }),
    /answers no fault explains:\n {2}1 × answer the contract forbids: 500 boom \(e\.g\. t-0 /,
  );
});

Deno.test("verifyDelivery() fails a keyed 503 outside the fault that explains it", async () => {
  await assert.rejects(
    verifyDelivery(drainedStage(rows), load, { keyed: keyedClient([keyed503(5_000), keyed202]) }),
    /1 × 503 queue_unavailable .* outside any fault that explains it \(e\.g\. t-0 sent at 5000/,
  );
});

Deno.test("verifyDelivery() fails a keyed try slower than the bound, and a hang", async () => {
  const slow = { ...keyed503(2_500), ms: 700 };
  await assert.rejects(
    verifyDelivery(drainedStage(rows), load, { keyed: keyedClient([slow, keyed202]) }),
    /1 × answer slower than 600 ms .*t-0 sent at 2500, 700 ms/,
  );
  const hang = { kind: "indeterminate", timedOut: true, sentAt: 2_500, ms: 5_000 } as const;
  await assert.rejects(
    verifyDelivery(drainedStage(rows), load, { keyed: keyedClient([hang, keyed202]) }),
    /no answer within the load's timeout \(a hang\)/,
  );
});

Deno.test("verifyDelivery() counts cut keyed tries against maxIndeterminate with the load's", async () => {
  const cut = { kind: "indeterminate", detail: "TypeError: fetch failed", sentAt: 2_500 } as const;
  const killed: Fault = { what: "API killed", from: 2_000, to: 3_000, excuses: ["cut"] };
  const stage = drainedStage(rows);
  stage.assertAnswers = (outcomes, options) => {
    const { problems } = checkAnswers(outcomes, [killed], options);
    assert.deepEqual(problems, []);
  };
  const client = () => keyedClient([cut, keyed202]);
  await verifyDelivery(stage, load, { keyed: client(), maxIndeterminate: 1 });
  await assert.rejects(
    verifyDelivery(stage, load, { keyed: client() }),
    /1 indeterminate answers where at most 0 may be/,
  );
});

Deno.test("verifyDelivery() is inconclusive when every keyed try was a 202", async () => {
  await assert.rejects(
    verifyDelivery(drainedStage(rows), load, { keyed: keyedClient([keyed202]) }),
    /^AssertionError.*inconclusive: the keyed client met no fault \(1 tries, each a 202\)/,
  );
});
