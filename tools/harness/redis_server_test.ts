import assert from "node:assert/strict";
import { isReadyReply, redisServerArgs } from "./redis_server.ts";

Deno.test("redisServerArgs() puts the config file first so the overrides win", () => {
  assert.deepEqual(
    redisServerArgs({ port: 56379, dir: "/tmp/r", configFile: "redis/redis.conf" }),
    ["redis/redis.conf", "--bind", "127.0.0.1", "--port", "56379", "--dir", "/tmp/r"],
  );
});

Deno.test("redisServerArgs() works without a config file", () => {
  assert.deepEqual(redisServerArgs({ port: 1, dir: "d" }), [
    "--bind",
    "127.0.0.1",
    "--port",
    "1",
    "--dir",
    "d",
  ]);
});

Deno.test("isReadyReply() accepts PONG and NOAUTH but not LOADING", () => {
  assert.equal(isReadyReply("+PONG"), true);
  assert.equal(isReadyReply("-NOAUTH Authentication required."), true);
  assert.equal(isReadyReply("-LOADING Redis is loading the dataset in memory"), false);
  assert.equal(isReadyReply(""), false);
});
