import assert from "node:assert/strict";
import { batchBody, bulkConnections, pipelineMicrosPerUser } from "./bulk.ts";
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

Deno.test("bulkConnections() keeps the users in flight of 100 per request above it, at least 4", () => {
  assert.deepEqual([1, 10, 100].map((n) => bulkConnections(64, n)), [64, 64, 64]);
  assert.equal(bulkConnections(64, 1_000), 6);
  assert.equal(bulkConnections(64, 200), 32);
  assert.equal(bulkConnections(8, 1_000), 4);
});
