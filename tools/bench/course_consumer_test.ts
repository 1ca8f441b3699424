import assert from "node:assert/strict";
import { consumeLikeTheCourse } from "./course_consumer.ts";
import { COURSE_QUEUE_NAME } from "./course_producer.ts";

Deno.test("consumeLikeTheCourse() inserts each popped name, one item per BRPOP, blocking forever", async () => {
  const items = ['{"name":"Ada"}', '{"name":"Grace"}'];
  const calls: [string, number][] = [];
  const inserted: string[] = [];
  await consumeLikeTheCourse(
    {
      brpop: (key, timeout) => {
        calls.push([key, timeout]);
        return Promise.resolve([key, items.shift()!]);
      },
    },
    (name) => Promise.resolve(inserted.push(name)),
    () => items.length > 0,
  );
  assert.deepEqual(inserted, ["Ada", "Grace"]);
  assert.deepEqual(calls, [[COURSE_QUEUE_NAME, 0], [COURSE_QUEUE_NAME, 0]]);
});

Deno.test("consumeLikeTheCourse() has no poison handling: a bad item stops it, as in the course", async () => {
  await assert.rejects(
    consumeLikeTheCourse(
      { brpop: (key) => Promise.resolve([key, "not json"]) },
      () => Promise.resolve(),
    ),
    SyntaxError,
  );
});
