import assert from "node:assert/strict";
import { resolveIncludes } from "./lua_include.ts";

Deno.test("resolveIncludes() puts each included file in place of its directive, nested ones too", () => {
  const files = {
    "main.lua": '#!lua\nlocal a = 1\n-- @include "includes/b.lua"\nreturn a + b\n',
    "includes/b.lua": '-- @include "includes/c.lua"\nlocal b = c + 1\n',
    "includes/c.lua": "local c = 2\n",
  };
  assert.equal(
    resolveIncludes("main.lua", files),
    "#!lua\nlocal a = 1\nlocal c = 2\nlocal b = c + 1\nreturn a + b\n",
  );
});

Deno.test("resolveIncludes() leaves a script without directives as it is", () => {
  const source = "#!lua flags=allow-oom\n-- KEYS[1] queue\nreturn 1\n";
  assert.equal(resolveIncludes("a.lua", { "a.lua": source }), source);
});

Deno.test("resolveIncludes() refuses a directive not written as one", () => {
  const files = { "a.lua": "-- @include includes/b.lua\n", "includes/b.lua": "" };
  assert.throws(() => resolveIncludes("a.lua", files), /is not written as/);
});

Deno.test("resolveIncludes() refuses an unknown include, naming the file that asked for it", () => {
  const files = { "main.lua": '-- @include "includes/gone.lua"\nreturn 1\n' };
  assert.throws(
    () => resolveIncludes("main.lua", files),
    (error: unknown) =>
      error instanceof RangeError &&
      /includes\/gone\.lua \(included by main\.lua\)/.test(error.message),
  );
  assert.throws(() => resolveIncludes("other.lua", files), RangeError);
});

Deno.test("resolveIncludes() refuses a file that includes itself through another", () => {
  const files = {
    "main.lua": '-- @include "includes/a.lua"\n',
    "includes/a.lua": '-- @include "includes/b.lua"\n',
    "includes/b.lua": '-- @include "includes/a.lua"\n',
  };
  assert.throws(
    () => resolveIncludes("main.lua", files),
    (error: unknown) =>
      error instanceof RangeError && error.message.includes("includes/b.lua → includes/a.lua"),
  );
});
