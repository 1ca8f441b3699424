import assert from "node:assert/strict";
import { failureRecap, notRun, parseTestSummary } from "./test_summary.ts";

Deno.test("parseTestSummary() reads a coloured summary with passed steps", () => {
  const output = "running 3 tests\n…\n\x1b[0m\x1b[32mok\x1b[0m | 12 passed (3 steps) | 0 failed " +
    "\x1b[0m\x1b[38;5;245m(9s)\x1b[0m\n";
  assert.deepEqual(parseTestSummary(output), {
    ok: true,
    passed: 12,
    failed: 0,
    ignored: 0,
    ignoredSteps: 0,
    filteredOut: 0,
  });
});

Deno.test("parseTestSummary() counts ignored tests and ignored steps", () => {
  const summary = parseTestSummary("ok | 2 passed (1 step) | 0 failed | 1 ignored (2 steps) (4ms)");
  assert.equal(summary?.ignored, 1);
  assert.equal(summary?.ignoredSteps, 2);
  assert.equal(notRun(summary!), 3);
  const stepsOnly = parseTestSummary("ok | 1 passed | 0 failed | 0 ignored (1 step) (2ms)");
  assert.equal(notRun(stepsOnly!), 1);
});

Deno.test("parseTestSummary() reads failures and filtered-out tests", () => {
  assert.deepEqual(
    parseTestSummary("FAILED | 1 passed | 1 failed (1 step) | 0 ignored (1 step) (6ms)"),
    { ok: false, passed: 1, failed: 1, ignored: 0, ignoredSteps: 1, filteredOut: 0 },
  );
  const filtered = parseTestSummary("ok | 0 passed | 0 failed | 2 filtered out (6ms)");
  assert.equal(notRun(filtered!), 2);
});

Deno.test("parseTestSummary() takes the last summary and is undefined without one", () => {
  const output = "ok | 1 passed | 0 failed (1ms)\nFAILED | 3 passed | 2 failed (5ms)\n";
  assert.equal(parseTestSummary(output)?.failed, 2);
  assert.equal(parseTestSummary("error: Module not found"), undefined);
});

Deno.test("failureRecap() names each failed test and step with the head of its error", () => {
  // A real `deno test` run (coloured) of one passing test, one failing and one failing step.
  const output = Deno.readTextFileSync(new URL("./testdata/failed_run.txt", import.meta.url));
  const recap = failureRecap(output);
  assert.deepEqual(recap.filter((l) => !l.startsWith(" ")), [
    "fails with a long message => ./dfail/a_test.ts:2:6",
    "steps ... inner fails => ./dfail/a_test.ts:3:43",
  ]);
  assert.equal(recap[1], "  error: Error: boom: stored 3 !== 0");
  assert.equal(recap[2], "  second line");
  assert.ok(recap.includes("  error: Error: inner"));
  assert.ok(!recap.some((l) => /^\s+at /.test(l.slice(2))), "no stack frame is kept");
});

Deno.test("failureRecap() is empty for a run that passed", () => {
  assert.deepEqual(
    failureRecap("running 1 test\nx ... ok (1ms)\n\nok | 1 passed | 0 failed (3ms)\n"),
    [],
  );
});
