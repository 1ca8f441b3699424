import assert from "node:assert/strict";
import { encodeEnvelope } from "./envelope.ts";
import { ageOf } from "./queue_stats.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

Deno.test("ageOf() is the seconds since the envelope's enqueued_at", () => {
  const item = encodeEnvelope({ id: ID, name: "Ada", enqueued_at: 10_000 });
  assert.equal(ageOf(item, 12_500), 2.5);
});

Deno.test("ageOf() is 0 for an empty list and never negative (the API's clock ahead of ours)", () => {
  assert.equal(ageOf(null, 1_000), 0);
  assert.equal(ageOf(encodeEnvelope({ id: ID, name: "Ada", enqueued_at: 2_000 }), 1_000), 0);
});

Deno.test("ageOf() is undefined for an item without a numeric enqueued_at", () => {
  for (const item of ["not json", "null", "5", '{"enqueued_at":"yesterday"}', "{}"]) {
    assert.equal(ageOf(item, 1_000), undefined, item);
  }
});
