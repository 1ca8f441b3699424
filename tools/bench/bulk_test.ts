import assert from "node:assert/strict";
import { batchBody, pipelineMicrosPerUser } from "./bulk.ts";
import { POST_BODY } from "./oha.ts";
import { bulkResult } from "./testdata/fixtures.ts";

Deno.test("batchBody() is a JSON array of the single-user body", () => {
  const body = batchBody(3);
  assert.deepEqual(JSON.parse(body), Array(3).fill(JSON.parse(POST_BODY)));
  assert.deepEqual(JSON.parse(batchBody(1)), [JSON.parse(POST_BODY)]);
});

Deno.test("pipelineMicrosPerUser() adds every tier but the load generator", () => {
  const run = bulkResult().batches.find((r) => r.usersPerRequest === 100)!;
  assert.equal(pipelineMicrosPerUser(run), 4 + 3 + 1 + 2 + 2);
});
