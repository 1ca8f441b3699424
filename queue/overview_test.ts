import assert from "node:assert/strict";
import { encodeEnvelope } from "./envelope.ts";
import { ageOf, mergeOverviews, overviewFromReply } from "./overview.ts";

Deno.test("overviewFromReply() sums the processing lists and ages the oldest item", () => {
  const overview = overviewFromReply([
    7,
    1,
    2,
    JSON.stringify({ id: "x", name: "Ada", enqueued_at: 1_000 }),
    [["b", 3, -2, "5"], ["a", 10, 4_000, "20"]],
    ["invalid_item", "2"],
    ["stored", "25", "stored:a", "20"],
    null,
  ], 3_500);
  assert.deepEqual(overview, {
    depth: { queued: 7, retry: 1, processing: 13, dead: 2 },
    oldest_queued_age_ms: 2_500,
    consumers: [
      { id: "a", alive: true, heartbeat_ttl_ms: 4_000, processing: 10, stored: 20 },
      { id: "b", alive: false, heartbeat_ttl_ms: 0, processing: 3, stored: 5 },
    ],
    dead_letters_by_reason: { invalid_item: 2 },
    stored_total: 25,
  });
});

Deno.test("overviewFromReply() has no age for an empty queue or an item pushed by hand", () => {
  for (const oldest of [null, "{not json", '{"name":"no time"}']) {
    const overview = overviewFromReply([0, 0, 0, oldest, [], [], [], null], 1);
    assert.equal(overview.oldest_queued_age_ms, null);
    assert.equal(overview.stored_total, 0);
  }
});

Deno.test("mergeOverviews() adds the shards up and lists each consumer once", () => {
  const shard = (queued: number, oldest: number | null, processing: number, ttl: number) =>
    overviewFromReply([
      queued,
      1,
      2,
      oldest === null ? null : JSON.stringify({ id: "x", name: "A", enqueued_at: oldest }),
      [["a", processing, ttl, "3"]],
      ["invalid_item", "2"],
      ["stored", "10", "stored:a", "3"],
      null,
    ], 10_000);
  const merged = mergeOverviews([
    shard(5, 4_000, 0, 4_000),
    shard(7, 1_000, 9, 3_000),
    shard(0, null, 0, -2),
  ]);
  assert.deepEqual(merged, {
    depth: { queued: 12, retry: 3, processing: 9, dead: 6 },
    oldest_queued_age_ms: 9_000,
    consumers: [{ id: "a", alive: false, heartbeat_ttl_ms: 0, processing: 9, stored: 9 }],
    dead_letters_by_reason: { invalid_item: 6 },
    stored_total: 30,
  });
});

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

Deno.test("ageOf() is the milliseconds since the envelope's enqueued_at", () => {
  const item = encodeEnvelope({ id: ID, name: "Ada", enqueued_at: 10_000 });
  assert.equal(ageOf(item, 12_500), 2_500);
});

Deno.test("ageOf() is never negative (the API's clock ahead of ours)", () => {
  assert.equal(ageOf(encodeEnvelope({ id: ID, name: "Ada", enqueued_at: 2_000 }), 1_000), 0);
});

Deno.test("ageOf() is undefined for an item without a numeric enqueued_at", () => {
  for (const item of ["not json", "null", "5", '{"enqueued_at":"yesterday"}', "{}"]) {
    assert.equal(ageOf(item, 1_000), undefined, item);
  }
});
