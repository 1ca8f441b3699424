import assert from "node:assert/strict";
import { COURSE_QUEUE_NAME, createCourseApp } from "./course_producer.ts";

function fakeRedis() {
  const pushed: [string, string][] = [];
  return {
    pushed,
    lpush: (key: string, value: string) => Promise.resolve(pushed.push([key, value])),
  };
}

Deno.test("createCourseApp() pushes the name and answers 202 Accepted, as the course does", async () => {
  const redis = fakeRedis();
  const response = await createCourseApp(redis).request("/users", {
    method: "POST",
    body: '{"name": "Queueing", "extra": true}',
  });
  assert.equal(response.status, 202);
  assert.equal(await response.text(), "Accepted");
  assert.deepEqual(redis.pushed, [[COURSE_QUEUE_NAME, '{"name":"Queueing"}']]);
});

Deno.test("createCourseApp() validates nothing: a body without a name is pushed too", async () => {
  const redis = fakeRedis();
  const response = await createCourseApp(redis).request("/users", { method: "POST", body: "{}" });
  assert.equal(response.status, 202);
  assert.deepEqual(redis.pushed, [[COURSE_QUEUE_NAME, "{}"]]);
});

Deno.test("createCourseApp() answers /readyz, which the benchmark waits for", async () => {
  const response = await createCourseApp(fakeRedis()).request("/readyz");
  assert.equal(response.status, 200);
  await response.body?.cancel();
});

Deno.test("the course's producer uses the API's Hono version", async () => {
  const imports = async (member: string) =>
    (JSON.parse(
      await Deno.readTextFile(new URL(`../../${member}/deno.json`, import.meta.url)),
    ) as { imports: Record<string, string> }).imports["@hono/hono"];
  assert.equal(await imports("tools/bench"), await imports("server"));
});
