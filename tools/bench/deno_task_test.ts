import assert from "node:assert/strict";
import {
  COURSE_PRODUCER_COMMAND,
  denoRunArgs,
  HTTP_FLOOR_COMMAND,
  REFERENCE_SERVER_COMMAND,
  taskCommand,
} from "./deno_task.ts";

Deno.test("denoRunArgs() puts the extra flags right after run", () => {
  assert.deepEqual(
    denoRunArgs("deno run --cached-only --allow-net server/main.ts", ["--cpu-prof"]),
    ["run", "--cpu-prof", "--cached-only", "--allow-net", "server/main.ts"],
  );
  assert.deepEqual(denoRunArgs(REFERENCE_SERVER_COMMAND).at(-1), "tools/bench/reference_server.ts");
});

Deno.test("denoRunArgs() refuses a command that is not a plain deno run", () => {
  assert.throws(() => denoRunArgs("deno task server"), /not "deno run <flags> <module>"/);
  assert.throws(() => denoRunArgs("node server.js"), TypeError);
});

Deno.test("taskCommand() reads the server and consumer tasks from deno.json", () => {
  assert.match(taskCommand("server"), /^deno run .* server\/main\.ts$/);
  assert.match(taskCommand("consumer"), /^deno run .* server-consumer\/main\.ts$/);
  assert.throws(() => taskCommand("nope"), /no such task/);
});

Deno.test("the course's producer and the HTTP floor run with the same permissions", () => {
  assert.deepEqual(
    denoRunArgs(COURSE_PRODUCER_COMMAND).slice(0, -1),
    denoRunArgs(HTTP_FLOOR_COMMAND).slice(0, -1),
  );
  assert.deepEqual(
    denoRunArgs(REFERENCE_SERVER_COMMAND).slice(0, -1),
    denoRunArgs(HTTP_FLOOR_COMMAND).slice(0, -1),
  );
  assert.equal(denoRunArgs(COURSE_PRODUCER_COMMAND).at(-1), "tools/bench/course_producer.ts");
  assert.equal(denoRunArgs(HTTP_FLOOR_COMMAND).at(-1), "tools/bench/http_floor.ts");
});
