import assert from "node:assert/strict";
import { parseEnv } from "../queue/config.ts";
import { postgresOptions, postgresVars } from "./postgres_options.ts";

Deno.test("postgresOptions() connects to compose's database by default", () => {
  const options = postgresOptions(parseEnv("test", postgresVars, {}));
  assert.deepEqual(
    [options.host, options.port, options.user, options.password, options.database],
    ["database", 5432, "username", "password", "database"],
  );
});

Deno.test("postgresVars rejects a port outside 1-65535, naming it", () => {
  assert.throws(
    () => parseEnv("test", postgresVars, { PGPORT: "70000" }),
    /PGPORT .*current value is "70000"/,
  );
});
