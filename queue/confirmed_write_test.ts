import assert from "node:assert/strict";
import { WriteUnconfirmedError } from "./confirmed_write.ts";

Deno.test("WriteUnconfirmedError says how many replicas acknowledged the write, and how many were pushed", () => {
  const error = new WriteUnconfirmedError("push", { wanted: 2, confirmed: 1, timeoutMs: 200 });
  assert.equal(error.name, "WriteUnconfirmedError");
  assert.equal(
    error.message,
    "Cannot confirm the push on 2 replicas: 1 acknowledged it within 200 ms",
  );
  assert.equal(error.pushed, 0);
  const some = new WriteUnconfirmedError("push", {
    wanted: 1,
    confirmed: 0,
    timeoutMs: 200,
    pushed: 3,
  });
  assert.equal(some.pushed, 3);
});
