import assert from "node:assert/strict";
import { freePort, freePorts, isPortFree, PICK_RANGE } from "./ports.ts";

Deno.test("freePorts() gives distinct free ports", () => {
  const ports = freePorts(5);
  assert.equal(new Set(ports).size, 5);
  assert.ok(ports.every(isPortFree));
  assert.ok(freePort() > 0);
  // Outside the ephemeral range, where outgoing connections take their source ports.
  assert.ok(ports.every((p) => p >= PICK_RANGE.from && p < PICK_RANGE.to), `${ports}`);
});

Deno.test("isPortFree() is false for a port something listens on", () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  assert.equal(isPortFree(listener.addr.port), false);
});
