import assert from "node:assert/strict";
import { ApiMetrics } from "@users-pipeline/server/metrics";
import {
  describeRefusals,
  explainRefusals,
  parseApiRefusals,
  TRAEFIK_OWN_BODY,
} from "./refusals.ts";

const none = { full: 0, unavailable: 0, unconfirmed: 0 };
const traefikLength = TRAEFIK_OWN_BODY.length;

Deno.test("parseApiRefusals() reads every reason from the API's own /metrics", async () => {
  const text = await (await new ApiMetrics({ replica: "bench" }).response()).text();
  assert.deepEqual(parseApiRefusals(text), none);
  const counted = text.replace(/(enqueue_rejections_total\{[^}]*reason="full"[^}]*\}) 0/, "$1 7");
  assert.equal(parseApiRefusals(counted).full, 7);
});

Deno.test("parseApiRefusals() refuses metrics that do not count a reason", () => {
  assert.throws(
    () => parseApiRefusals('users_pipeline_enqueue_rejections_total{reason="full"} 1\n'),
    /lack users_pipeline_enqueue_rejections_total\{reason="unavailable"\}/,
  );
});

Deno.test("explainRefusals() explains Traefik's 503s by their body and the API's by its counts", () => {
  const refusals = explainRefusals(
    9,
    new Map([[traefikLength, 3], [57, 4], [112, 2]]),
    {
      before: { full: 1, unavailable: 0, unconfirmed: 0 },
      after: { full: 5, unavailable: 2, unconfirmed: 0 },
    },
  );
  assert.deepEqual(refusals, {
    total: 9,
    traefik: 3,
    api: { full: 4, unavailable: 2, unconfirmed: 0 },
    unexplained: 0,
  });
  assert.equal(
    describeRefusals(refusals),
    "3 Traefik's own (no replica ready), 4 queue_full, 2 queue_unavailable, 0 unconfirmed, 0 unexplained",
  );
});

Deno.test("explainRefusals() leaves a 503 no record accounts for unexplained, either way", () => {
  // A 503 with a JSON body the API did not count.
  assert.equal(
    explainRefusals(3, new Map([[57, 3]]), { before: none, after: { ...none, full: 2 } })
      .unexplained,
    1,
  );
  // The API counted a 503 that oha never saw.
  assert.equal(
    explainRefusals(1, new Map([[57, 1]]), { before: none, after: { ...none, unavailable: 2 } })
      .unexplained,
    1,
  );
  // Nothing refused, nothing to explain.
  assert.equal(explainRefusals(0, new Map(), { before: none, after: none }).unexplained, 0);
});
