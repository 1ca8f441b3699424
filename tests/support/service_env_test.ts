import assert from "node:assert/strict";
import { projectEnv } from "@users-pipeline/harness/services";
import type { Outcome } from "./fault_load.ts";
import { ANSWER_MARGIN_MS, answerBound, FAST_ENV, serviceEnv } from "./service_env.ts";

Deno.test("serviceEnv() layers project.env, the base, FAST_ENV and each change in turn", () => {
  const env = serviceEnv(
    { QUEUE_NAME: "q1", REDIS_TIMEOUT_MS: "9" },
    { PORT: "1", BATCH_SIZE: "7" },
    { BATCH_SIZE: "8", REDIS_TIMEOUT_MS: undefined },
  );
  assert.equal(env.QUEUE_NAME, "q1");
  assert.equal(env.PORT, "1");
  assert.equal(env.BATCH_SIZE, "8", "a later change wins");
  assert.equal(env.REDIS_TIMEOUT_MS, projectEnv().REDIS_TIMEOUT_MS, "undefined: project.env's");
  assert.equal(env.HEARTBEAT_TTL_MS, FAST_ENV.HEARTBEAT_TTL_MS, "FAST_ENV over project.env");
  assert.equal(serviceEnv({}).REDIS_TIMEOUT_MS, FAST_ENV.REDIS_TIMEOUT_MS, "FAST_ENV over base");
});

Deno.test("serviceEnv() refuses to reset a variable project.env lacks", () => {
  assert.throws(() => serviceEnv({}, { NOT_IN_PROJECT_ENV: undefined }), TypeError);
});

Deno.test("answerBound() is each API's REDIS_TIMEOUT_MS plus the margin", () => {
  const bound = answerBound(new Map([["http://a", 500]]));
  const answer = (url: string) => ({ url } as Outcome);
  assert.equal(bound(answer("http://a")), 500 + ANSWER_MARGIN_MS);
  assert.throws(() => bound(answer("http://b")), TypeError);
});
