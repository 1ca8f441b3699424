import assert from "node:assert/strict";
import { parseStackConfig, STACK_DEFAULTS } from "./stack_config.ts";

Deno.test("parseStackConfig() fills every default for no arguments and no variables", () => {
  assert.deepEqual(parseStackConfig([], {}), {
    ...STACK_DEFAULTS,
    postgresBinDir: undefined,
  });
});

Deno.test("parseStackConfig() reads the replica counts in both flag spellings", () => {
  const config = parseStackConfig(["--servers", "4", "--consumers=0"], {});
  assert.equal(config.servers, 4);
  assert.equal(config.consumers, 0);
});

Deno.test("parseStackConfig() reads the STACK_* variables and treats empty as unset", () => {
  const config = parseStackConfig([], {
    STACK_DIR: "/tmp/s",
    STACK_HTTP_PORT: "18000",
    STACK_PG_PORT: "",
    STACK_REDIS_PORT: "16379",
    STACK_PROMETHEUS_PORT: "19090",
    STACK_API_BASE_PORT: "18101",
    STACK_CONSUMER_BASE_PORT: "18201",
    STACK_PG_BIN_DIR: "/opt/pg/bin",
  });
  assert.equal(config.stateDir, "/tmp/s");
  assert.equal(config.httpPort, 18000);
  assert.equal(config.postgresPort, STACK_DEFAULTS.postgresPort);
  assert.equal(config.redisPort, 16379);
  assert.equal(config.prometheusPort, 19090);
  assert.equal(config.apiBasePort, 18101);
  assert.equal(config.consumerBasePort, 18201);
  assert.equal(config.postgresBinDir, "/opt/pg/bin");
});

Deno.test("parseStackConfig() names the bad variable and its value", () => {
  assert.throws(() => parseStackConfig([], { STACK_PG_PORT: "5432x" }), {
    name: "RangeError",
    message: /STACK_PG_PORT .*current value is "5432x"/,
  });
  assert.throws(() => parseStackConfig(["--servers", "0"], {}), {
    name: "RangeError",
    message: /--servers .*current value is "0"/,
  });
  assert.throws(() => parseStackConfig([], { STACK_API_BASE_PORT: "65535" }), {
    name: "RangeError",
    message: /Cannot start 2 servers as STACK_API_BASE_PORT leaves too few ports/,
  });
  assert.throws(() => parseStackConfig([], { STACK_CONSUMER_BASE_PORT: "65535" }), {
    name: "RangeError",
    message: /Cannot start 2 consumers as STACK_CONSUMER_BASE_PORT leaves too few ports/,
  });
});

Deno.test("parseStackConfig() rejects unknown arguments with a TypeError", () => {
  assert.throws(() => parseStackConfig(["--replicas", "3"], {}), TypeError);
  assert.throws(() => parseStackConfig(["up"], {}), TypeError);
});
