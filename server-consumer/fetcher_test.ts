import assert from "node:assert/strict";
import { FencedError } from "@users-pipeline/queue";
import { Fetcher } from "./fetcher.ts";
import { Abandoned, Retrier } from "./retrier.ts";
import { FakeClock, MemoryQueue, until, user } from "./test_fakes.ts";

async function setUp() {
  const clock = new FakeClock();
  const queue = new MemoryQueue();
  const retrier = new Retrier({
    clock,
    retryMaxDelayMs: 5_000,
    onEvent: () => {},
    onMeasurement: () => {},
  });
  const waits: number[] = [];
  const fetcher = new Fetcher({
    queue,
    retrier,
    membership: { id: "c1" },
    batchSize: 2,
    waitForItems: (seconds) => Promise.resolve(void waits.push(seconds)),
    blockTimeoutSeconds: 2,
  });
  await queue.register("c1");
  return { clock, queue, retrier, fetcher, waits };
}

Deno.test("Fetcher.fetch() takes a batch, an empty one from an empty queue, and rejects once fenced", async () => {
  const { queue, fetcher } = await setUp();
  queue.push(user(1), user(2), user(3));
  const batch = await fetcher.fetch();
  assert.deepEqual(batch.items, [user(1), user(2)]);
  assert.equal(batch.consumerId, "c1");
  assert.deepEqual((await fetcher.fetch(2)).items, [user(3)]);
  assert.deepEqual((await fetcher.fetch(3)).items, []);
  queue.fence("c1");
  await assert.rejects(fetcher.fetch(), FencedError);
  assert.deepEqual(queue.fetchHeld, [0, 2, 3, 0]);
});

Deno.test("Fetcher.fetch() retries a failing Redis until it answers", async () => {
  const { clock, queue, fetcher } = await setUp();
  queue.fetchFailures.push(new Error("Connection is closed."), new Error("Connection is closed."));
  queue.push(user(1));
  let items: readonly string[] | undefined;
  void fetcher.fetch().then((batch) => void (items = batch.items));
  await until(clock, () => items !== undefined, "the batch after the failures");
  assert.deepEqual(items, [user(1)]);
  assert.equal(queue.fetchHeld.length, 3);
});

Deno.test("Fetcher.fetch() takes nothing once stopping: it is given up", async () => {
  const { queue, retrier, fetcher } = await setUp();
  queue.push(user(1));
  retrier.stop();
  await assert.rejects(fetcher.fetch(), Abandoned);
  assert.deepEqual(queue.fetchHeld, [], "no call once stopping");
});

Deno.test("Fetcher.wait() waits for items for the blocking timeout", async () => {
  const { fetcher, waits } = await setUp();
  await fetcher.wait();
  assert.deepEqual(waits, [2]);
});
