import assert from "node:assert/strict";
import type { Overview } from "@users-pipeline/queue";
import { renderStats, statsLine } from "./stats.ts";

const OVERVIEW: Overview = {
  depth: { queued: 1_500, retry: 1, processing: 2_000, dead: 3 },
  oldest_queued_age_ms: 850,
  consumers: [
    {
      id: "consumer-1:a1",
      alive: true,
      heartbeat_ttl_ms: 4_000,
      processing: 1_000,
      stored: 42_000,
    },
    { id: "consumer-2:b2", alive: false, heartbeat_ttl_ms: 0, processing: 1_000, stored: 7 },
  ],
  dead_letters_by_reason: { invalid_item: 2, consumer_crashed: 1, id_conflict: 0 },
  stored_total: 123_456,
};
const AT = new Date("2025-01-02T03:04:05Z");
const RATES = { ingest: 1_234.4, stored: 987.6, consumers: { "consumer-1:a1": 600 } };

Deno.test("renderStats() shows the rates, the depth by state, each consumer and the dead letters", () => {
  const screen = renderStats(OVERVIEW, { at: AT, rates: RATES });
  assert.match(screen, /ingest +1,234 \/s +stored total +123,456/);
  assert.match(screen, /stored +988 \/s +oldest queued 850 ms/);
  assert.match(screen, /queued 1,500 {3}retry 1 {3}processing 2,000 {3}dead 3/);
  assert.match(screen, /consumers \(2\)\n +consumer-1:a1 +600 \/s +42,000 stored\n/);
  assert.match(screen, /consumer-2:b2 +– \/s +7 stored {2}\(expired\)/);
  assert.match(screen, /dead letters \(3\)\n +invalid_item +2\n +consumer_crashed +1$/);
  assert.doesNotMatch(screen, /id_conflict/, "a kind with no letters is left out");
});

Deno.test("renderStats() shows dashes until a second reading gives rates, and – for no age", () => {
  const screen = renderStats({ ...OVERVIEW, oldest_queued_age_ms: null }, { at: AT });
  assert.match(screen, /ingest +– \/s/);
  assert.match(screen, /stored +– \/s +oldest queued –/);
});

Deno.test("statsLine() puts one reading on one line of key=value pairs", () => {
  assert.equal(
    statsLine(OVERVIEW, { at: AT, rates: RATES }),
    "2025-01-02T03:04:05.000Z ingest=1,234/s stored=988/s stored_total=123456 queued=1500 " +
      "retry=1 processing=2000 dead=3 (invalid_item:2,consumer_crashed:1) oldest_queued=850 ms " +
      "consumers=2",
  );
});
