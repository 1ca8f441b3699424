import assert from "node:assert/strict";
import { isUuid } from "@users-pipeline/queue";
import { uuidV7 } from "./uuid_v7.ts";

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

Deno.test("uuidV7() mints canonical version-7, variant-10 UUIDs", () => {
  for (let i = 0; i < 5_000; i++) {
    const id = uuidV7();
    assert.match(id, V7);
    assert(isUuid(id));
  }
});

Deno.test("uuidV7() carries the millisecond it was minted in", () => {
  const before = Date.now();
  const id = uuidV7();
  const after = Date.now();
  const ms = parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
  assert(ms >= before && ms <= after + 1, `${ms} not in [${before}, ${after}]`);
});

Deno.test("uuidV7() mints distinct ids in increasing order, past a refill of its random pool", () => {
  const ids = Array.from({ length: 10_000 }, () => uuidV7());
  assert.equal(new Set(ids).size, ids.length);
  for (let i = 1; i < ids.length; i++) assert(ids[i - 1]! < ids[i]!, `${ids[i - 1]} ≥ ${ids[i]}`);
});
