import assert from "node:assert/strict";
import { freePort, freePorts, isPortFree } from "./ports.ts";

Deno.test("freePorts() gives distinct free ports", () => {
  const ports = freePorts(5);
  assert.equal(new Set(ports).size, 5);
  assert.ok(ports.every(isPortFree));
  assert.ok(freePort() > 0);
});

Deno.test("isPortFree() is false for a port something listens on", () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  assert.equal(isPortFree(listener.addr.port), false);
});
