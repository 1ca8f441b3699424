import assert from "node:assert/strict";
import { checkDelivery, deliveryHeld } from "./delivery_check.ts";
import type { Outcome } from "./fault_load.ts";

const url = "http://127.0.0.1:1";
const accepted = (name: string, id: string): Outcome => ({
  name,
  url,
  kind: "accepted",
  status: 202,
  id,
  sentAt: 0,
  ms: 1,
});
const rejected = (name: string): Outcome => ({
  name,
  url,
  kind: "rejected",
  status: 503,
  retryAfter: "1",
  sentAt: 0,
  ms: 1,
});
const indeterminate = (name: string): Outcome => ({
  name,
  url,
  kind: "indeterminate",
  detail: "TypeError: fetch failed",
  sentAt: 0,
  ms: 1,
});

Deno.test("checkDelivery() passes when every 202 is stored once under its id", () => {
  const report = checkDelivery(
    [accepted("a", "1"), rejected("b"), indeterminate("c"), indeterminate("d")],
    [{ id: "1", name: "a" }, { id: "3", name: "c" }],
  );
  assert.ok(deliveryHeld(report));
  assert.equal(report.indeterminateStored, 1);
});

Deno.test("checkDelivery() reports a lost, a doubled, an invented and a re-keyed user", () => {
  const report = checkDelivery(
    [accepted("lost", "1"), accepted("moved", "2"), rejected("refused"), indeterminate("twice")],
    [
      { id: "9", name: "moved" },
      { id: "3", name: "refused" },
      { id: "4", name: "twice" },
      { id: "5", name: "twice" },
      { id: "6", name: "nobody" },
    ],
  );
  assert.ok(!deliveryHeld(report));
  assert.deepEqual(report.lost, ["lost"]);
  assert.deepEqual(report.wrongIds, ["moved"]);
  assert.deepEqual(report.duplicated, ["twice"]);
  assert.deepEqual(report.unexpectedRows, ["refused", "nobody"]);
});

Deno.test("checkDelivery() expects injected users and tolerates optional ones", () => {
  const report = checkDelivery([], [{ id: "1", name: "pushed" }, { id: "2", name: "twin" }], {
    injected: [{ id: "1", name: "pushed" }, { id: "7", name: "missing" }],
    mayStore: ["twin"],
  });
  assert.deepEqual(report.lost, ["missing"]);
  assert.deepEqual(report.unexpectedRows, []);
  assert.equal(report.mayStoreStored, 1);
});

Deno.test("checkDelivery() holds a 503 that names an id to that id, stored or not, never as a 202", () => {
  const settleable = (name: string, id: string): Outcome => ({ ...rejected(name), id });
  const report = checkDelivery(
    [settleable("kept", "1"), settleable("rekeyed", "2"), settleable("never", "3")],
    [{ id: "1", name: "kept" }, { id: "9", name: "rekeyed" }],
    { mayStore: ["kept", "rekeyed", "never"] },
  );
  assert.deepEqual(report.lost, [], "a 503's user need not be stored");
  assert.deepEqual(report.wrongIds, ["rekeyed"]);
  assert.equal(report.mayStoreStored, 2);
});
