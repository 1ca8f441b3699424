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

if (import.meta.main) {
  const [file] = Deno.args;
  const summary = file === undefined ? undefined : parseTestSummary(Deno.readTextFileSync(file));
  if (summary === undefined) Deno.exit(1);
  console.log(`${summary.passed} ${summary.failed} ${notRun(summary)}`);
}
