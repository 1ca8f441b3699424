import assert from "node:assert/strict";
import { ApiError } from "./api_error.ts";
import { parseBatch } from "./batch_body.ts";

const JSON_BATCH = { ndjson: false, maxItems: 3 };
const NDJSON_BATCH = { ndjson: true, maxItems: 3 };

function refusal(work: () => unknown): { code: string; line?: number } {
  try {
    work();
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return error.line === undefined ? { code: error.code } : { code: error.code, line: error.line };
  }
  assert.fail("expected a refusal");
}

Deno.test("parseBatch() reads a JSON array's items, valid or not, for the route to validate", () => {
  assert.deepEqual(parseBatch('[{"name":"Ada"}, 7]', JSON_BATCH), [{ name: "Ada" }, 7]);
  assert.deepEqual(parseBatch("[]", JSON_BATCH), []);
});

Deno.test("parseBatch() refuses JSON that is not an array, and text that is not JSON, with 400 codes", () => {
  assert.deepEqual(refusal(() => parseBatch('{"name":"Ada"}', JSON_BATCH)), {
    code: "invalid_batch",
  });
  assert.deepEqual(refusal(() => parseBatch("[{", JSON_BATCH)), { code: "invalid_json" });
  // NDJSON sent as JSON is not JSON.
  assert.deepEqual(refusal(() => parseBatch('{"name":"A"}\n{"name":"B"}', JSON_BATCH)), {
    code: "invalid_json",
  });
});

Deno.test("parseBatch() reads NDJSON one user a line, with or without a final newline, CRLF too", () => {
  assert.deepEqual(parseBatch('{"name":"A"}\n{"name":"B"}\n', NDJSON_BATCH), [
    { name: "A" },
    { name: "B" },
  ]);
  assert.deepEqual(parseBatch('{"name":"A"}\r\n{"name":"B"}', NDJSON_BATCH), [
    { name: "A" },
    { name: "B" },
  ]);
  assert.deepEqual(parseBatch("", NDJSON_BATCH), [], "no line: an empty batch, for the 422");
});

Deno.test("parseBatch() refuses a blank or broken NDJSON line with 400 invalid_ndjson naming it", () => {
  assert.deepEqual(refusal(() => parseBatch('{"name":"A"}\n\n{"name":"B"}', NDJSON_BATCH)), {
    code: "invalid_ndjson",
    line: 2,
  });
  assert.deepEqual(refusal(() => parseBatch('{"name":"A"}\n{"name":"B"}\n\n', NDJSON_BATCH)), {
    code: "invalid_ndjson",
    line: 3,
  });
  assert.deepEqual(refusal(() => parseBatch('{"name":"A"}\n{"name":\n', NDJSON_BATCH)), {
    code: "invalid_ndjson",
    line: 2,
  });
});

Deno.test("parseBatch() refuses more than maxItems users with 413 too_many_items, NDJSON before parsing a line", () => {
  assert.deepEqual(refusal(() => parseBatch("[1,2,3,4]", JSON_BATCH)), {
    code: "too_many_items",
  });
  // Four lines, none of them JSON: the count refuses it first.
  assert.deepEqual(refusal(() => parseBatch("a\nb\nc\nd", NDJSON_BATCH)), {
    code: "too_many_items",
  });
  assert.equal(parseBatch("[1,2,3]", JSON_BATCH).length, 3, "maxItems itself is accepted");
});
