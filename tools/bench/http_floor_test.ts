import assert from "node:assert/strict";
import { createFloorApp } from "./http_floor.ts";

Deno.test("createFloorApp() answers POST /users 202 with an empty body once the body is read", async () => {
  let pulled = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      pulled = true;
      controller.enqueue(new TextEncoder().encode('{"name": "Queueing"}'));
      controller.close();
    },
  }, { highWaterMark: 0 });
  const response = await createFloorApp().request("/users", { method: "POST", body });
  assert.equal(response.status, 202);
  assert.equal(await response.text(), "");
  assert.ok(pulled, "the request's body was never read");
});

Deno.test("createFloorApp() does nothing else: a body that is not JSON is answered 202 too", async () => {
  const response = await createFloorApp().request("/users", { method: "POST", body: "not json" });
  assert.equal(response.status, 202);
  await response.body?.cancel();
});

Deno.test("createFloorApp() answers /readyz, which the benchmark and Traefik's health check ask", async () => {
  const response = await createFloorApp().request("/readyz");
  assert.equal(response.status, 200);
  await response.body?.cancel();
});
