import assert from "node:assert/strict";
import { pendingFromReply } from "./pending_lists.ts";

Deno.test("pendingFromReply() pairs each list with its length", () => {
  assert.deepEqual(
    pendingFromReply(["users", 3, "users:processing:a", "2"]),
    new Map([["users", 3], ["users:processing:a", 2]]),
  );
  assert.deepEqual(pendingFromReply([]), new Map());
});
