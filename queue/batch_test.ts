import assert from "node:assert/strict";
import { ackCall, FencedError, fetchCall, FetchedBatch, fieldsOfReply } from "./batch.ts";
import { queueKeys } from "./keys.ts";

Deno.test("fieldsOfReply() reads a fetch's reply: oldest first, a recovered item, a suspect waiting", () => {
  // The script answers in the list's order, newest at the left.
  assert.deepEqual(fieldsOfReply([0, ["b", "a"]], "c1"), {
    items: ["a", "b"],
    fromRetry: false,
    consumerId: "c1",
  });
  assert.deepEqual(fieldsOfReply([0], "c1"), { items: [], fromRetry: false, consumerId: "c1" });
  assert.deepEqual(fieldsOfReply([1, "x"], "c1"), {
    items: ["x"],
    fromRetry: true,
    consumerId: "c1",
  });
  assert.deepEqual(fieldsOfReply([2], "c1"), {
    items: [],
    fromRetry: false,
    suspectWaiting: true,
    consumerId: "c1",
  });
});

Deno.test("fieldsOfReply() rejects a fenced consumer with FencedError, naming it", () => {
  assert.throws(
    () => fieldsOfReply(-1, "c1"),
    (error) => error instanceof FencedError && error.consumerId === "c1",
  );
});

Deno.test("fetchCall() and ackCall() pass the script exactly the arguments it documents", () => {
  const keys = queueKeys("users");
  assert.deepEqual(fetchCall(keys, { consumerId: "c1", max: 10 }).args, {
    consumerId: "c1",
    max: 10,
    held: 0,
    holdingElsewhere: "0",
  });
  const batch = new FetchedBatch({ items: ["a", "b"], fromRetry: false, consumerId: "c1" }, {
    ack: () => Promise.resolve(),
    ackAndFetch: () => Promise.reject(new Error("not used")),
  });
  const letter = {
    payload: "b",
    reason: "r",
    kind: "invalid_item" as const,
    dead_at: "2026-01-01T00:00:00.000Z",
  };
  const call = ackCall(keys, {
    batch,
    outcome: { storedIds: ["id-a"], deadLetters: [letter] },
    next: { max: 10, held: 3 },
  });
  assert.equal(call.keys.processing, keys.processingPrefix + "c1");
  assert.deepEqual(call.args, {
    consumerId: "c1",
    count: 2,
    fromRetry: "0",
    oldestItem: "a",
    next: 10,
    heldAfter: 3,
    storedCount: 1,
  });
  assert.deepEqual(call.restArgs, ["id-a", "", "invalid_item", JSON.stringify(letter)]);
  const alone = ackCall(keys, { batch, outcome: {} });
  assert.deepEqual([alone.args.next, alone.args.heldAfter, alone.restArgs], [0, 0, []]);
});

Deno.test("FetchedBatch finishes itself through the queue that handed it out", async () => {
  const calls: unknown[] = [];
  const batch: FetchedBatch = new FetchedBatch(
    { items: ["a"], fromRetry: true, consumerId: "c1", shard: 2 },
    {
      ack: (outcome) => Promise.resolve(void calls.push(["ack", outcome])),
      ackAndFetch: (outcome, next) => {
        calls.push(["ackAndFetch", outcome, next]);
        return Promise.resolve(batch);
      },
    },
  );
  assert.equal(batch.suspectWaiting, false);
  assert.equal(batch.shard, 2);
  await batch.ack();
  assert.equal(await batch.ackAndFetch({ storedIds: ["x"] }, { max: 1 }), batch);
  assert.deepEqual(calls, [["ack", {}], ["ackAndFetch", { storedIds: ["x"] }, { max: 1 }]]);
});
