import assert from "node:assert/strict";
import { FetchedBatch } from "@users-pipeline/queue";
import { InFlight } from "./in_flight.ts";

const batch = (...items: string[]) =>
  new FetchedBatch({ items, fromRetry: false, consumerId: "c1" }, {
    ack: () => Promise.resolve(),
    ackAndFetch: () => Promise.reject(new Error("not used")),
  });

Deno.test("InFlight holds the batch acknowledged, the one in hand and the one ahead, and counts their items", () => {
  const held = new InFlight();
  const first = held.hold(batch("a", "b"));
  assert.equal(held.ahead, undefined);
  held.putAhead(batch("c"));
  assert.equal(held.items, 3);
  const acked = Promise.resolve(undefined);
  held.acknowledging(first, acked);
  assert.equal(held.acking, acked);
  // The one ahead is stored next.
  const second = held.takeInHand()!;
  assert.deepEqual(second.batch.items, ["c"]);
  assert.equal(second.stage, "in_hand");
  assert.equal(held.ahead, undefined);
  assert.equal(held.items, 3);
  held.ackSettled();
  assert.equal(held.acking, undefined);
  assert.equal(held.items, 1);
  held.release(second);
  assert.equal(held.items, 0);
});

Deno.test("InFlight.takeInHand() with nothing ahead takes nothing", () => {
  const held = new InFlight();
  assert.equal(held.takeInHand(), undefined);
  assert.equal(held.items, 0);
});

Deno.test("InFlight.clear() drops every batch: fenced, the consumer holds nothing", () => {
  const held = new InFlight();
  held.hold(batch("a"));
  held.putAhead(batch("b"), Promise.resolve({} as never));
  held.clear();
  assert.equal(held.items, 0);
  assert.equal(held.ahead, undefined);
});
