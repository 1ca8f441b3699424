import assert from "node:assert/strict";
import { Readiness } from "../queue/readiness.ts";
import { healthHandler, serveHealth } from "./health_server.ts";

Deno.test("serveHealth() answers /healthz and /readyz over HTTP, on a port of its own", async () => {
  const readiness = new Readiness({ redis: () => Promise.resolve() }, {
    timeoutMs: 100,
    starting: "migrating the schema",
  });
  let listening = 0;
  const server = serveHealth(readiness, {
    port: 0,
    hostname: "127.0.0.1",
    onListen: (port) => listening = port,
  });
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    assert.equal(listening, server.addr.port);
    const alive = await fetch(`${url}/healthz`);
    assert.equal(alive.status, 200);
    assert.deepEqual(await alive.json(), { status: "alive" });
    const starting = await fetch(`${url}/readyz`);
    assert.equal(starting.status, 503);
    assert.equal(starting.headers.get("Retry-After"), "1");
    assert.deepEqual(await starting.json(), {
      status: "not ready",
      reason: "starting: migrating the schema",
    });
    readiness.started();
    const ready = await fetch(`${url}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { status: "ready" });
  } finally {
    await server.shutdown();
  }
});

Deno.test("healthHandler() answers other paths 404 and other methods 405, in JSON", async () => {
  const handle = healthHandler(new Readiness({}, { timeoutMs: 100 }));
  const missing = await handle(new Request("http://consumer/metrics"));
  assert.equal(missing.status, 404);
  assert.match((await missing.json()).error, /no route for GET \/metrics/);
  const wrong = await handle(new Request("http://consumer/readyz", { method: "POST" }));
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get("Allow"), "GET, HEAD");
  await wrong.body?.cancel();
  assert.equal((await handle(new Request("http://consumer/readyz"))).status, 200);
});

Deno.test("healthHandler() answers GET /metrics when given metrics", async () => {
  const handle = healthHandler(new Readiness({}, { timeoutMs: 100 }), {
    metrics: () => Promise.resolve(new Response("# metrics\n", { headers: { "X-From": "m" } })),
  });
  const res = await handle(new Request("http://consumer/metrics"));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("X-From"), "m");
  assert.equal(await res.text(), "# metrics\n");
  const wrong = await handle(new Request("http://consumer/metrics", { method: "POST" }));
  assert.equal(wrong.status, 405);
  await wrong.body?.cancel();
});
