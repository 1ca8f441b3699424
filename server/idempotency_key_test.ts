import assert from "node:assert/strict";
import { ApiError } from "./api_error.ts";
import { IDEMPOTENCY_KEY_MAX_LENGTH, parseIdempotencyKey } from "./idempotency_key.ts";

Deno.test("parseIdempotencyKey() takes 1 to 255 visible ASCII characters, and nothing without a header", () => {
  assert.equal(parseIdempotencyKey(undefined, true), undefined);
  assert.equal(parseIdempotencyKey(undefined, false), undefined);
  for (
    const key of [
      "a",
      "0190b6e4-9e43-7c2e-a4f4-3f6c0d2e8b11",
      '"sf-string"',
      "~!@#$%^&*()_+{}|:<>?",
    ]
  ) {
    assert.equal(parseIdempotencyKey(key, true), key);
  }
  assert.equal(parseIdempotencyKey("k".repeat(IDEMPOTENCY_KEY_MAX_LENGTH), true)?.length, 255);
});

Deno.test("parseIdempotencyKey() refuses a malformed key, or any key where none is taken, with invalid_idempotency_key", () => {
  const malformed = [
    "",
    "k".repeat(IDEMPOTENCY_KEY_MAX_LENGTH + 1),
    "two words",
    "a, b",
    "tab\tkey",
    "naïve",
    "nul\0",
  ];
  const cases: [string, boolean][] = [...malformed.map((key): [string, boolean] => [key, true]), [
    "fine",
    false,
  ]];
  for (const [key, taken] of cases) {
    assert.throws(
      () => parseIdempotencyKey(key, taken),
      (error) =>
        error instanceof ApiError && error.code === "invalid_idempotency_key" &&
        error.status === 400,
      JSON.stringify(key),
    );
  }
});
