import assert from "node:assert/strict";
import type { ConsumerEvent } from "./consumer_events.ts";
import { Retrier } from "./retrier.ts";
import { StoreStep } from "./store_step.ts";
import { FakeClock, MemoryStore, pgError, until, user } from "./test_fakes.ts";

function setUp() {
  const clock = new FakeClock();
  const store = new MemoryStore();
  const events: ConsumerEvent[] = [];
  const retrier = new Retrier({
    clock,
    retryMaxDelayMs: 5_000,
    onEvent: (event) => events.push(event),
    onMeasurement: () => {},
  });
  return { clock, store, events, step: new StoreStep({ store, retrier, clock }) };
}

const id = (n: number) => JSON.parse(user(n)).id as string;

Deno.test("StoreStep.store() stores the valid users and makes a dead letter of each invalid item and refused row", async () => {
  const { store, step } = setUp();
  store.rows.set(id(4), "someone else");
  const batch = {
    items: [user(1), "{not json", user(2, "bad row"), user(3), user(4)],
    fromRetry: false,
  };
  const stored = await step.store(batch);
  assert.equal(stored.batch, batch);
  assert.deepEqual(stored.storedIds, [id(1), id(3)]);
  assert.deepEqual(stored.deadLetters.map((d) => [d.kind, d.id, d.sqlstate]), [
    ["invalid_item", undefined, undefined],
    ["database_refused", id(2), "23514"],
    ["id_conflict", id(4), undefined],
  ]);
  assert.deepEqual(stored.deadLetters.map((d) => d.payload), [
    "{not json",
    user(2, "bad row"),
    user(4),
  ]);
  assert.equal(stored.insertSeconds, 0);
  assert.equal(stored.latenciesSeconds.length, 2);
});

Deno.test("StoreStep.store() sends no statement for a batch of poison only", async () => {
  const { store, step } = setUp();
  const stored = await step.store({ items: ["{not json"], fromRetry: false });
  assert.equal(store.statements, 0);
  assert.equal(stored.insertSeconds, undefined);
  assert.deepEqual(stored.storedIds, []);
  assert.equal(stored.deadLetters.length, 1);
});

Deno.test("StoreStep.store() retries a transient failure instead of burying the batch", async () => {
  const { clock, store, step, events } = setUp();
  store.failures.push(pgError("57P01", "terminating connection"));
  let stored: Awaited<ReturnType<typeof step.store>> | undefined;
  void step.store({ items: [user(1)], fromRetry: false }).then((result) => void (stored = result));
  await until(clock, () => stored !== undefined, "the batch stored after the failure");
  assert.equal(store.statements, 2);
  assert.deepEqual(stored!.storedIds, [id(1)]);
  assert.deepEqual(stored!.deadLetters, []);
  assert.deepEqual(events.map((e) => e.event), ["outage_started", "outage_ended"]);
});
