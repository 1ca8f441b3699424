import assert from "node:assert/strict";
import { aliveResponse, DRAINING, Readiness } from "./readiness.ts";

const ok = () => Promise.resolve("PONG");
const never = () => new Promise<never>(() => {});

Deno.test("Readiness answers 200 ready when every probe answers", async () => {
  const readiness = new Readiness({ redis: ok, postgres: ok }, { timeoutMs: 100 });
  const res = await readiness.response();
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: "ready" });
  assert.equal(res.headers.get("Cache-Control"), "no-store");
});

Deno.test("Readiness answers 503 with Retry-After naming each dependency that failed", async () => {
  const readiness = new Readiness({
    redis: () => Promise.reject(new Error("connect ECONNREFUSED 127.0.0.1:6379")),
    postgres: ok,
  }, { timeoutMs: 100 });
  const res = await readiness.response();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  assert.deepEqual(await res.json(), {
    status: "not ready",
    reason: "redis: connect ECONNREFUSED 127.0.0.1:6379",
  });
});

Deno.test("Readiness counts a probe that does not answer within the timeout as a failure", async () => {
  const readiness = new Readiness({ redis: ok, postgres: never }, { timeoutMs: 20 });
  const started = Date.now();
  assert.deepEqual(await readiness.check(), {
    ready: false,
    reason: "postgres: no answer within 20 ms",
  });
  assert.ok(Date.now() - started < 1_000);
});

Deno.test("Readiness is not ready while starting, whatever the probes say", async () => {
  const readiness = new Readiness({ redis: ok }, { timeoutMs: 100, starting: "migrating" });
  assert.deepEqual(await readiness.check(), { ready: false, reason: "starting: migrating" });
  readiness.starting("registering");
  assert.deepEqual(await readiness.check(), { ready: false, reason: "starting: registering" });
  readiness.started();
  assert.deepEqual(await readiness.check(), { ready: true });
});

Deno.test("Readiness shares one round of probes between concurrent asks", async () => {
  let probes = 0;
  const { promise, resolve } = Promise.withResolvers<void>();
  const readiness = new Readiness({
    redis: () => {
      probes++;
      return promise;
    },
  }, { timeoutMs: 1_000 });
  const asks = [readiness.check(), readiness.check(), readiness.check()];
  resolve();
  assert.deepEqual(await Promise.all(asks), [{ ready: true }, { ready: true }, { ready: true }]);
  assert.equal(probes, 1);
  await readiness.check();
  assert.equal(probes, 2, "a later ask probes again");
});

Deno.test("Readiness.drain() answers a waiting ask at once and every later one", async () => {
  const readiness = new Readiness({ postgres: never }, { timeoutMs: 60_000 });
  const waiting = readiness.response();
  readiness.drain();
  const res = await waiting;
  assert.equal(res.status, 503);
  assert.deepEqual(await res.json(), { status: "not ready", reason: DRAINING });
  assert.ok(readiness.draining);
  readiness.started();
  assert.deepEqual(await readiness.check(), { ready: false, reason: DRAINING });
});

Deno.test("aliveResponse() is a 200 that says the process is alive", async () => {
  const res = aliveResponse();
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: "alive" });
});
