import assert from "node:assert/strict";
import { overviewFromReply } from "./overview.ts";

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
