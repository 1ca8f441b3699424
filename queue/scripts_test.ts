import assert from "node:assert/strict";
import { QUEUE_SCRIPTS, SCRIPTS_WITH_KEY_COUNT } from "./scripts.ts";

/** A script's header: the comment lines after the shebang, up to the code. */
function headerOf(lua: string): string[] {
  const lines = lua.split("\n").slice(1);
  return lines.slice(0, lines.findIndex((line) => !line.startsWith("--")));
}

Deno.test("every queue script assembles, with no include directive left and its shebang first", () => {
  assert.equal(QUEUE_SCRIPTS.length, 10);
  for (const script of QUEUE_SCRIPTS) {
    assert.doesNotMatch(script.lua, /@include/, script.name);
    // Redis reads flags only from a shebang on the very first line.
    assert.match(script.lua, /^#!lua( flags=(allow-oom|no-writes))?\n/, script.name);
  }
  // The consumer's scripts run on a full Redis; the API's pushes are refused there.
  const flags = Object.fromEntries(
    QUEUE_SCRIPTS.map((script) => [script.name, script.lua.split("\n")[0]]),
  );
  assert.equal(flags.queueEnqueue, "#!lua");
  assert.equal(flags.queueEnqueueOnce, "#!lua");
  assert.equal(flags.queueOverview, "#!lua flags=no-writes");
  assert.equal(flags.queueAck, "#!lua flags=allow-oom");
});

Deno.test("every queue script's header names the keys and arguments it is defined with, in order", () => {
  for (const script of QUEUE_SCRIPTS) {
    const header = headerOf(script.lua);
    const named = (kind: "KEYS" | "ARGV") =>
      header.flatMap((line) => {
        const match = new RegExp(`^-- +${kind}\\[(\\d+)\\] +(\\w+)`).exec(line);
        return match === null ? [] : [[Number(match[1]), match[2]] as const];
      });
    const rest = (kind: "KEYS" | "ARGV") =>
      header.flatMap((line) => {
        const match = new RegExp(`^-- +${kind}\\[(\\d+)…\\]`).exec(line);
        return match === null ? [] : [Number(match[1])];
      });
    assert.deepEqual(named("KEYS"), script.keys.map((name, i) => [i + 1, name]), script.name);
    assert.deepEqual(named("ARGV"), script.args.map((name, i) => [i + 1, name]), script.name);
    assert.deepEqual(rest("KEYS"), script.restKeys ? [script.keys.length + 1] : [], script.name);
    assert.deepEqual(rest("ARGV"), script.restArgs ? [script.args.length + 1] : [], script.name);
    assert.ok(
      header.some((line) => line.startsWith("-- Returns ")),
      `${script.name} says its reply`,
    );
  }
});

Deno.test("SCRIPTS_WITH_KEY_COUNT lists exactly the scripts sent with their key count first", () => {
  assert.deepEqual(SCRIPTS_WITH_KEY_COUNT, ["queueRecover", "queueOverview"]);
});
