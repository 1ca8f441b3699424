import assert from "node:assert/strict";
import { z } from "zod";
import { intVar, parseEnv, queueVars } from "./config.ts";

Deno.test("parseEnv() fills every default for an empty environment", () => {
  const config = parseEnv("test", queueVars, {});
  assert.deepEqual(config, {
    REDIS_URL: "redis://redis:6379",
    QUEUE_NAME: "users",
    QUEUE_MAX_LENGTH: 1_000_000,
  });
  assert.ok(Object.isFrozen(config));
});

Deno.test("parseEnv() treats an empty value as unset", () => {
  assert.equal(parseEnv("test", queueVars, { QUEUE_NAME: "" }).QUEUE_NAME, "users");
});

Deno.test("parseEnv() names every bad variable with its value", () => {
  assert.throws(
    () => parseEnv("test", { ...queueVars, N: intVar(1, 5) }, { QUEUE_MAX_LENGTH: "-3", N: "x" }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /^Cannot start test: /);
      assert.match(error.message, /QUEUE_MAX_LENGTH .*: current value is "-3"/);
      assert.match(error.message, /N .*: current value is "x"/);
      return true;
    },
  );
});

Deno.test("parseEnv() rejects a value outside an enum", () => {
  assert.throws(
    () => parseEnv("test", { MODE: z.enum(["a", "b"]) }, { MODE: "c" }),
    /MODE .*current value is "c"/,
  );
});
