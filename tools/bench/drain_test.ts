import assert from "node:assert/strict";
import { batchesAhead } from "@users-pipeline/consumer/consumer";
import { storeClientOptions } from "@users-pipeline/consumer/postgres_store";
import { FLOOR_BATCH, FLOOR_OVERLAP, runOverlapped } from "./drain.ts";

/** Runs `runOverlapped` over 0..count-1 and records what was in flight when each chunk began. */
async function trace(count: number, size: number, overlap: number) {
  const started: number[][] = [];
  const busy = new Set<number[]>();
  let most = 0;
  await runOverlapped(
    Array.from({ length: count }, (_, i) => i),
    { size, overlap },
    async (chunk) => {
      started.push(chunk);
      busy.add(chunk);
      most = Math.max(most, busy.size);
      // A timer, so that a chunk is still in flight when the next could begin.
      await new Promise((resolve) => setTimeout(resolve, 2));
      busy.delete(chunk);
    },
  );
  return { started, most };
}

Deno.test("runOverlapped() sends every chunk once, in order, the last one short", async () => {
  const { started } = await trace(7, 3, 2);
  assert.deepEqual(started, [[0, 1, 2], [3, 4, 5], [6]]);
});

Deno.test("runOverlapped() sends the next chunk while one is in flight, never more than overlap", async () => {
  // The consumer's overlap, not one statement at a time.
  assert.equal((await trace(10, 1, 2)).most, 2);
  assert.equal((await trace(10, 1, 3)).most, 3);
});

Deno.test("the drain floor keeps as many statements in flight as a full-queue consumer holds batches", () => {
  assert.equal(FLOOR_OVERLAP, 1 + batchesAhead(FLOOR_BATCH));
  assert.equal(FLOOR_OVERLAP, 3, "the batch in hand and two ahead");
  assert.equal(storeClientOptions(1_000).max, 2, "over the consumer's two connections");
});
