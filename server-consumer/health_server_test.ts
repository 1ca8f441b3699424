import assert from "node:assert/strict";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { Readiness } from "@users-pipeline/runtime/readiness";
import { healthHandler, serveHealth } from "./health_server.ts";

Deno.test("serveHealth() answers /healthz and /readyz over HTTP, on a port of its own", async () => {
  const readiness = new Readiness({ redis: () => Promise.resolve() }, {
    timeoutMs: 100,
    starting: "migrating the schema",
  });
  const records: Record<string, unknown>[] = [];
  const server = serveHealth(readiness, {
    port: 0,
    hostname: "127.0.0.1",
    log: new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) }),
  });
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    assert.equal(records[0]?.event, "listening");
    assert.equal(records[0]?.port, server.addr.port);
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

Deno.test("serveHealth() logs listen_failed and exits 1 when its port is taken", () => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const records: Record<string, unknown>[] = [];
  try {
    assert.throws(
      () =>
        serveHealth(new Readiness({}, { timeoutMs: 100 }), {
          port: taken.addr.port,
          hostname: "127.0.0.1",
          log: new EventLog("server-consumer", { write: (line) => records.push(JSON.parse(line)) }),
          exit: (code) => {
            throw new Error(`exit ${code}`);
          },
        }),
      /^Error: exit 1$/,
    );
  } finally {
    taken.close();
  }
  assert.equal(records[0]?.event, "listen_failed");
  assert.equal(records[0]?.port, taken.addr.port);
  assert.match(String(records[0]?.msg), /^Cannot serve \/healthz and \/readyz on port \d+: /);
});
