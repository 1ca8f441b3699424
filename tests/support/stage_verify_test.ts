import assert from "node:assert/strict";
import { queueShards } from "@users-pipeline/queue";
import { QUEUE_FULL, QUEUE_UNAVAILABLE, QUEUE_UNCONFIRMED } from "./answer_check.ts";
import type { Outcome } from "./fault_load.ts";
import {
  accounting,
  inLossWindow,
  matchDeadLetters,
  pushMayHaveRun,
  type StageReport,
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
