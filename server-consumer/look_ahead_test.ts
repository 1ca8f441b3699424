import assert from "node:assert/strict";
import { FencedError, FetchedBatch } from "@users-pipeline/queue";
import { InFlight } from "./in_flight.ts";
import { LookAhead } from "./look_ahead.ts";
import { Abandoned } from "./retrier.ts";

const batch = (size: number, { fromRetry = false } = {}) =>
  new FetchedBatch({
    items: Array.from({ length: size }, (_, i) => `i${i}`),
    fromRetry,
    consumerId: "c1",
  }, {
    ack: () => Promise.resolve(),
    ackAndFetch: () => Promise.reject(new Error("not used")),
  });

/** A look-ahead over batches of 10 whose fetches answer `answers` in turn. */
function setUp(...answers: (number | Error)[]) {
  const inFlight = new InFlight();
  const fetchHeld: number[] = [];
  const storing: number[] = [];
  const lookAhead = new LookAhead({
    fetcher: {
      fetch: (held = 0) => {
        fetchHeld.push(held);
        const answer = answers.shift() ?? 0;
        return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(batch(answer));
      },
    },
    storeStep: {
      store: (taken) => {
        storing.push(taken.items.length);
        return Promise.resolve({} as never);
      },
    },
    inFlight,
    batchSize: 10,
  });
  return { inFlight, fetchHeld, storing, lookAhead };
}

Deno.test("LookAhead fetches early only in flow, beside a full batch not recovered, and stores what it takes at once", async () => {
  const { inFlight, fetchHeld, storing, lookAhead } = setUp(10);
  const inHand = inFlight.hold(batch(10));
  await lookAhead.takeDuring(inHand.batch);
  assert.deepEqual(fetchHeld, [], "not in flow: the first batch after a pause is fetched alone");
  lookAhead.flowing = true;
  await lookAhead.takeDuring(batch(9));
  await lookAhead.takeDuring(batch(10, { fromRetry: true }));
  assert.deepEqual(fetchHeld, [], "a partial batch emptied the queue; a suspect is held alone");
  await lookAhead.takeDuring(inHand.batch);
  assert.deepEqual(fetchHeld, [10]);
  assert.deepEqual(storing, [10]);
  assert.equal(inFlight.aheadCount, 1);
  assert.equal(inFlight.items, 20);
});

Deno.test("LookAhead takes what the acknowledgement in flight fetched, and one more once it settled, up to batchesAhead", async () => {
  const { inFlight, fetchHeld, storing, lookAhead } = setUp(10, 10);
  const acked = inFlight.hold(batch(10));
  const inHand = inFlight.hold(batch(10));
  inFlight.acknowledging(acked, Promise.resolve(batch(10)));
  await lookAhead.takeDuring(inHand.batch);
  // The acknowledged batch no longer counts: in hand, and the one it fetched.
  assert.deepEqual(fetchHeld, [20]);
  assert.deepEqual(storing, [10, 10]);
  assert.equal(inFlight.aheadCount, 2);
  // Two ahead: the next acknowledgement's batch is taken, and no more.
  inFlight.takeInHand();
  inFlight.acknowledging(inHand, Promise.resolve(batch(10)));
  await lookAhead.takeDuring(inHand.batch);
  assert.deepEqual(fetchHeld, [20]);
  assert.equal(inFlight.aheadCount, 2);
});

Deno.test("LookAhead takes nothing when stopping gives its fetch up, and passes being fenced on", async () => {
  const stopping = setUp(new Abandoned(false));
  stopping.lookAhead.flowing = true;
  await stopping.lookAhead.takeDuring(stopping.inFlight.hold(batch(10)).batch);
  assert.deepEqual(stopping.storing, []);
  assert.equal(stopping.inFlight.items, 10);
  const fenced = setUp(new FencedError("c1"));
  fenced.lookAhead.flowing = true;
  await assert.rejects(fenced.lookAhead.takeDuring(batch(10)), FencedError);
});
