/**
 * Reads the summary line `deno test` ends with, so that `./stack test` can
 * restate it with the ignored tests counted and fail when any test or step
 * was ignored or filtered out: the whole suite runs, or the run fails.
 *
 *   deno run --allow-read tools/stack/test_summary.ts <deno test output file>
 *
 * prints `<passed> <failed> <ignored>` (ignored counts tests, steps and
 * filtered-out tests) and exits 0, or exits 1 when the output has no summary.
 *
 *   deno run --allow-read tools/stack/test_summary.ts --failures <file>
 *
 * prints each failed test's name, place and the head of its error, so that
 * the last lines of a long CI log say what failed (a log read from its tail
 * otherwise shows only the counts).
 *
 * @module
 */

/** What one `deno test` run reported. */
export interface TestSummary {
  /** The first word: `ok`, or `FAILED`. */
  readonly ok: boolean;
  readonly passed: number;
  readonly failed: number;
  /** Tests marked ignored (`ignore: true`, or ignored by their own condition). */
  readonly ignored: number;
  /** Steps (`t.step`) marked ignored. */
  readonly ignoredSteps: number;
  /** Tests left out by `--filter`. */
  readonly filteredOut: number;
}

/** Escape sequences of a coloured terminal. */
// deno-lint-ignore no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;

/**
 * The last summary line in `output`, such as
 * `ok | 12 passed (3 steps) | 0 failed | 2 ignored (1 step) (9s)`, or
 * undefined when there is none.
 */
export function parseTestSummary(output: string): TestSummary | undefined {
  const line = output.replace(ANSI, "").split("\n").findLast((l) => /^(ok|FAILED) \| /.test(l));
  if (line === undefined) return undefined;
  const field = (name: string) => {
    const match = new RegExp(`\\| (\\d+) ${name}(?: \\((\\d+) steps?\\))?`).exec(line);
    return { count: Number(match?.[1] ?? 0), steps: Number(match?.[2] ?? 0) };
  };
  const ignored = field("ignored");
  return {
    ok: line.startsWith("ok"),
    passed: field("passed").count,
    failed: field("failed").count,
    ignored: ignored.count,
    ignoredSteps: ignored.steps,
    filteredOut: field("filtered out").count,
  };
}

/** Everything that did not run: ignored tests and steps, and filtered-out tests. */
export function notRun(summary: TestSummary): number {
  return summary.ignored + summary.ignoredSteps + summary.filteredOut;
}

/** How many lines of one error {@link failureRecap} keeps. */
const ERROR_LINES = 8;

/**
 * Each failed test or step of the `ERRORS` section of `output`, as its
 * `name => ./file:line:col` line followed by the head of its error (up to the
 * stack trace, at most {@link ERROR_LINES} lines): empty when nothing failed.
 */
export function failureRecap(output: string): string[] {
  const lines = output.replace(ANSI, "").split("\n");
  const start = lines.findIndex((l) => l.trim() === "ERRORS");
  if (start < 0) return [];
  const recap: string[] = [];
  let kept = 0;
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === "FAILURES" || /^(ok|FAILED) \| /.test(line)) break;
    if (/ => \S+:\d+:\d+$/.test(line)) {
      recap.push(line);
      kept = -1; // the error's own lines follow, from its `error:` line on
    } else if (kept === -1 && line.startsWith("error: ")) {
      recap.push(`  ${line}`);
      kept = 1;
    } else if (kept > 0 && kept < ERROR_LINES && !/^\s+at /.test(line)) {
      if (line.trim() === "") continue;
      recap.push(`  ${line}`);
      kept++;
    } else if (kept > 0) {
      kept = ERROR_LINES; // the stack trace began: the rest is frames
    }
  }
  return recap;
}

if (import.meta.main) {
  if (Deno.args[0] === "--failures") {
    const file = Deno.args[1];
    if (file === undefined) Deno.exit(1);
    for (const line of failureRecap(Deno.readTextFileSync(file))) console.log(line);
    Deno.exit(0);
  }
  const [file] = Deno.args;
  const summary = file === undefined ? undefined : parseTestSummary(Deno.readTextFileSync(file));
  if (summary === undefined) Deno.exit(1);
  console.log(`${summary.passed} ${summary.failed} ${notRun(summary)}`);
}
