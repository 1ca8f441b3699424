/**
 * Items the course's producer pushes (`{"name": …}`, no id) against a real
 * Redis: the take gives each an id in the same step that moves it into the
 * processing list, so every later delivery of it carries that id; the API's
 * envelopes and anything else pass the take unchanged.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { v7 as uuidv7 } from "uuid";
import {
  decodeEnvelope,
  encodeEnvelope,
  isUuid,
  PoisonMessageError,
  queueKeys,
  ShardedQueue,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { startRedis } from "@users-pipeline/harness/services";

Deno.test("a take gives the course's {name} items a UUIDv7 and leaves every other item as it was", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const keys = queueKeys("course-items");
  const queue = new ShardedQueue(redis, { keys: [keys] });
  try {
    const ours = encodeEnvelope({ id: uuidv7(), name: "Ours", enqueued_at: Date.now() });
    const untouched = [
      ours,
      '{"name":"Extra","email":"e@example.com"}',
      '{"name":5}',
      '{"name":null}',
      '["Ada"]',
      "not json {",
    ];
    const course = ['{"name":"Ada"}', '{"name": "Grace / \\"Hopper\\" ✓"}', '{"name":""}'];
    // LPUSH one at a time, oldest first, as the course's producer does.
    for (const item of [course[0]!, ...untouched, ...course.slice(1)]) {
      await redis.lpush(keys.queue, item);
    }
    const before = Date.now();

    await queue.register("taker", 60_000);
    const batch = await queue.fetch({ consumerId: "taker", max: 100 });
    assert.ok(batch !== undefined);
    assert.equal(batch.items.length, course.length + untouched.length);
    assert.deepEqual(
      batch.items.slice(1, 1 + untouched.length),
      untouched,
      "other items are not rewritten",
    );

    // Rewritten, not judged: an empty name gets an id too, and the consumer buries it with its reason.
    const given: UserEnvelope[] = [batch.items[0]!, ...batch.items.slice(1 + untouched.length)]
      .map((item) => JSON.parse(item));
    assert.deepEqual(given.map((user) => user.name), ["Ada", 'Grace / "Hopper" ✓', ""]);
    assert.deepEqual(
      given.map((user) => Object.keys(user)),
      Array(3).fill(["id", "name", "enqueued_at"]),
    );
    assert.equal(decodeEnvelope(batch.items[0]!).name, "Ada");
    assert.throws(() => decodeEnvelope(batch.items.at(-1)!), PoisonMessageError);
    for (const user of given) {
      assert.ok(isUuid(user.id), user.id);
      assert.equal(user.id[14], "7", `version 7: ${user.id}`);
      assert.match(user.id[19]!, /[89ab]/, `RFC 9562 variant: ${user.id}`);
      // The id's first 48 bits are Redis' clock in ms, as enqueued_at is.
      assert.equal(parseInt(user.id.replaceAll("-", "").slice(0, 12), 16), user.enqueued_at);
      assert.ok(Math.abs(user.enqueued_at - before) < 5_000, `enqueued_at ${user.enqueued_at}`);
    }
    assert.equal(new Set(given.map((user) => user.id)).size, given.length, "each item its own id");

    // What the processing list holds is what the consumer was given, byte for byte.
    const held = await redis.lrange(keys.processingPrefix + "taker", 0, -1);
    assert.deepEqual(held.toReversed(), batch.items);
  } finally {
    redis.disconnect();
  }
});

Deno.test("a course item keeps the id of its first take through recovery and a repeated fetch", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const keys = queueKeys("course-redelivery");
  const queue = new ShardedQueue(redis, { keys: [keys] });
  try {
    await redis.lpush(keys.queue, '{"name":"Ada"}', '{"name":"Ada"}');
    await queue.register("crashed", 60_000);
    const first = await queue.fetch({ consumerId: "crashed", max: 1 });
    const [taken] = first?.items ?? [];
    assert.ok(taken !== undefined);
    const id = decodeEnvelope(taken).id;

    // A fetch whose reply was lost is repeated (the consumer says it holds nothing): the same item.
    const repeated = await queue.fetch({ consumerId: "crashed", max: 1 });
    assert.deepEqual(repeated?.items, [taken]);

    // The consumer dies holding it: recovered into the retry list as it was, taken by another.
    await redis.del(keys.heartbeatPrefix + "crashed");
    assert.deepEqual(await queue.recover(3), { recovered: 1, buried: 0, consumers: 1 });
    await queue.register("heir", 60_000);
    const again = await queue.fetch({ consumerId: "heir", max: 10 });
    assert.deepEqual([again.items, again.fromRetry], [[taken], true]);
    assert.equal(decodeEnvelope(again.items[0]!).id, id);

    // The second `{"name":"Ada"}` is another user: another id.
    await queue.register("third", 60_000);
    const other = await queue.fetch({ consumerId: "third", max: 10 });
    assert.equal(other?.items.length, 1);
    assert.notEqual(decodeEnvelope(other.items[0]!).id, id);
  } finally {
    redis.disconnect();
  }
});
