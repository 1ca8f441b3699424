import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { DeadLetters, MAX_PAGE } from "./dead_letters.ts";
import { queueKeys } from "./keys.ts";

// The scripts against a real Redis are in tests/integration/dead_letters_test.ts.

Deno.test("DeadLetters.list() refuses a page it would not serve, before any I/O", async () => {
  const redis = new Redis({ lazyConnect: true });
  try {
    const letters = new DeadLetters(redis, queueKeys("users"));
    await assert.rejects(letters.list(-1, 10), RangeError);
    await assert.rejects(letters.list(0, 0), RangeError);
    await assert.rejects(letters.list(0, MAX_PAGE + 1), /between 1 and 1000/);
  } finally {
    redis.disconnect();
  }
});
