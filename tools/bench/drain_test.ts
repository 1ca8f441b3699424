import assert from "node:assert/strict";
import { batchesAhead } from "@users-pipeline/consumer/consumer";
import { storeClientOptions } from "@users-pipeline/consumer/postgres_store";
import {
  fastest,
  FLOOR_BATCH,
  FLOOR_CONNECTIONS,
  FLOOR_OVERLAPS,
  type FloorRun,
  readDrain,
  runOverlapped,
} from "./drain.ts";

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

Deno.test("the drain floor inserts over a consumer's connections, at overlaps of its own", () => {
  assert.equal(FLOOR_CONNECTIONS, storeClientOptions(1_000).max, "a consumer's two connections");
  // Its best effort is fixed: 1 to 4 in flight, wider than the consumer's own choice, which
  // therefore cannot move it.
  assert.deepEqual(FLOOR_OVERLAPS, [1, 2, 3, 4]);
  assert.ok((FLOOR_OVERLAPS as readonly number[]).includes(1 + batchesAhead(FLOOR_BATCH)));
});

Deno.test("fastest() keeps the floor's best overlap, the first of equals", () => {
  const run = (overlap: number, rowsPerSecond: number): FloorRun => ({
    users: 1_000,
    batch: FLOOR_BATCH,
    overlap,
    seconds: 1_000 / rowsPerSecond,
    rowsPerSecond,
  });
  assert.equal(fastest([run(1, 100), run(2, 300), run(3, 250), run(4, 300)]).overlap, 2);
});

Deno.test("readDrain() counts nothing of the backlog taken during the warm-up", async () => {
  // The warm-up's 2000 users queued, 1000 of them being stored: a timed backlog of 100000
  // has none taken yet, though the queue holds 98000 fewer than it.
  const queue = {
    depth: () => Promise.resolve({ queued: 2_000, processing: 1_000, retry: 0, dead: 0 }),
  };
  assert.deepEqual(await readDrain(queue, undefined), { empty: false, taken: 0 });
  assert.deepEqual(await readDrain(queue, 100_000), { empty: false, taken: 98_000 });
  const done = { depth: () => Promise.resolve({ queued: 0, processing: 0, retry: 0, dead: 0 }) };
  assert.deepEqual(await readDrain(done, undefined), { empty: true, taken: 0 });
});
