import assert from "node:assert/strict";
import { startService } from "./service_start.ts";

class Exited extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

const options = (lines: string[]) => ({
  hostname: () => "host-a",
  exit: (code: number): never => {
    throw new Exited(code);
  },
  write: (line: string) => void lines.push(line),
});

Deno.test("startService() names the replica by REPLICA_ID, else by the hostname", () => {
  const lines: string[] = [];
  const named = startService("server", () => ({ REPLICA_ID: "server-2" }), options(lines));
  assert.equal(named.replica, "server-2");
  named.log.info("listening", { msg: "listening" });
  assert.equal(JSON.parse(lines[0]!).replica, "server-2");
  const unnamed = startService("server", () => ({ REPLICA_ID: "" }), options(lines));
  assert.equal(unnamed.replica, "host-a");
  assert.deepEqual(unnamed.config, { REPLICA_ID: "" });
});

Deno.test("startService() logs config_invalid under the hostname and exits 1 on a bad variable", () => {
  const lines: string[] = [];
  assert.throws(
    () =>
      startService("server-consumer", () => {
        throw new TypeError('Cannot start server-consumer: PORT too big: current value is "0x"');
      }, options(lines)),
    (error: unknown) => error instanceof Exited && error.code === 1,
  );
  const record = JSON.parse(lines[0]!);
  assert.equal(record.event, "config_invalid");
  assert.equal(record.level, "error");
  assert.equal(record.service, "server-consumer");
  assert.equal(record.replica, "host-a");
  assert.match(record.msg, /PORT too big/);
});
