import assert from "node:assert/strict";
import { delay, waitFor, waitForHttp } from "./wait.ts";

Deno.test("waitFor() returns once the check is true", async () => {
  let calls = 0;
  const ms = await waitFor("the third call", () => ++calls === 3, { intervalMs: 1 });
  assert.equal(calls, 3);
  assert.ok(ms >= 0);
});

Deno.test("waitFor() names what it waited for, as last seen, when it times out", async () => {
  let seen = 0;
  await assert.rejects(
    waitFor(() => `a miracle (seen ${seen})`, () => (seen++, false), {
      timeoutMs: 20,
      intervalMs: 1,
    }),
    { message: /^Cannot wait any longer for a miracle \(seen \d+\): not true after 20 ms$/ },
  );
});

Deno.test("waitFor() ends at once when the check throws", async () => {
  await assert.rejects(
    waitFor("a dead process", () => {
      throw new RangeError("it exited");
    }),
    RangeError,
  );
});

Deno.test("waitForHttp() waits through 503s until /readyz answers 200", async () => {
  let answers = 0;
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(null, { status: ++answers < 3 ? 503 : 200 }),
  );
  await waitForHttp(`http://127.0.0.1:${server.addr.port}/readyz`, { intervalMs: 1 });
  assert.equal(answers, 3);
});

Deno.test("waitForHttp() reports the last answer when it times out", async () => {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(null, { status: 503 }),
  );
  await assert.rejects(
    waitForHttp(`http://127.0.0.1:${server.addr.port}/readyz`, { timeoutMs: 50, intervalMs: 5 }),
    { message: /\/readyz to answer 200 \(last answer: status 503\): not true after 50 ms$/ },
  );
});

Deno.test("waitForHttp() stops waiting once the process is gone", async () => {
  let alive = true;
  const waiting = waitForHttp("http://127.0.0.1:9/readyz", { alive: () => alive, intervalMs: 5 });
  await delay(20);
  alive = false;
  await assert.rejects(waiting, { message: /as its process exited: last answer was / });
});
