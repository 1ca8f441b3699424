/**
 * The benchmark: every phase on real processes, each figure next to a floor
 * (or the course's own code) measured in the same run, then `report.md` (Markdown tables),
 * `chart.svg` (Vega-Lite rendered headless) and `results.json` (every figure)
 * in the output dir.
 *
 * 1. Ingest: `POST /users` on one API process in queue mode, against the
 *    HTTP floor (`http_floor.ts`) and the course's own producer, beside two
 *    diagnostics (the same app without Redis, and in direct mode: an INSERT
 *    per request); oha in closed loop.
 * 1b. Traefik: the same through Traefik (oha): its ceiling (the HTTP floor
 *    behind it), our API at the stack's defaults, the course's producer.
 * 2. Drain: consumers in single and batch mode against the drain floor
 *    (an insert from memory over a consumer's connections, the best of 1–4
 *    statements in flight), and the course's own consumer next to single mode.
 * 3. End to end: the native stack through Traefik at open-model rates up to
 *    Traefik's ceiling (oha), each 503 given its cause.
 * 4. Growth: consumer memory and speed against backlog size; API memory under
 *    2× overload with a small QUEUE_MAX_LENGTH (oha, open model).
 * 5. Bulk: the native stack through Traefik, `POST /users/batch` with 1 to
 *    1000 users per request and `POST /users` beside it, oha in closed loop,
 *    the consumers draining: users/s and each tier's CPU per user.
 *
 *   deno run --cached-only --allow-read --allow-write --allow-run --allow-env \
 *     --allow-net=127.0.0.1 --allow-sys=hostname,osRelease,networkInterfaces,loadavg,uid,gid \
 *     tools/bench/main.ts [--quick | --capacity] [--out DIR] [--only PHASES]
 *
 * `--quick` (CI) runs every phase small and short, in about two minutes, and
 * writes to tools/bench/results/quick/ so it never overwrites the full run's
 * tools/bench/results/; `--capacity` runs what the capacity model
 * needs (the traefik phase, a drain and the bulk run of 100 users per request) and writes its report, with the model, to
 * tools/bench/results/capacity/ (every run whose results allow it has the
 * model in its report); `--only ingest,traefik,drain,e2e,growth,bulk` runs some phases;
 * `--render DIR/results.json --out DIR` only rewrites a run's report and chart
 * (after a change to them). Reads env: PATH, HOME, STACK_TOOLS_DIR,
 * STACK_PG_BIN_DIR. Exits 1 if a phase
 * fails, a check fails (checks.ts: a 202 not kept or a push no 202 counted, a
 * user a drain did not store, an answer the contract does not allow without a
 * fault, requests not sent or answers slower than the contract's bound below
 * Traefik's ceiling) or no check ran at all; a target that is not met is
 * reported, not an error (a busy machine must not fail CI).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { startBenchServices } from "./bench_services.ts";
import { runBulk } from "./bulk.ts";
import { capacityInputs, capacityModel } from "./capacity.ts";
import { capacityChartSpec, chartSpec, renderSvg } from "./chart_spec.ts";
import { type Check, checkResults, checksHeld, checksSummary } from "./checks.ts";
import { runDrain } from "./drain.ts";
import { runEndToEnd } from "./end_to_end.ts";
import { runGrowth } from "./growth.ts";
import { runIngest } from "./ingest.ts";
import { installInterruptHandler } from "./interrupt.ts";
import { CAPACITY_PLAN, FULL_PLAN, QUICK_PLAN } from "./plan.ts";
import { Progress } from "./progress.ts";
import { renderReport } from "./report.ts";
import type { BenchResults } from "./results.ts";
import { evaluateTargets } from "./targets.ts";
import { runThroughTraefik } from "./through_traefik.ts";
import { checkTools } from "./tools.ts";

/** The phases, in the order they run. */
export const PHASES = ["ingest", "traefik", "drain", "growth", "e2e", "bulk"] as const;

/** The phases `--capacity` runs unless `--only` says otherwise. */
export const CAPACITY_PHASES = ["traefik", "drain", "bulk"] as const;
type Phase = typeof PHASES[number];

/** The parsed command line. */
export interface BenchArgs {
  readonly quick: boolean;
  /** `--capacity`: the capacity model's measurements, and the model printed. */
  readonly capacity: boolean;
  readonly out: string;
  readonly phases: readonly Phase[];
  /** A results.json to render again instead of measuring. */
  readonly render?: string;
}

const USAGE = "[--quick | --capacity] [--out DIR] [--only PHASES] [--render RESULTS_JSON]";

/**
 * Parses `[--quick | --capacity] [--out DIR] [--only PHASES] [--render RESULTS_JSON]`.
 *
 * @throws {TypeError} for an unknown argument or phase, or `--quick` with `--capacity`.
 */
export function parseBenchArgs(args: readonly string[]): BenchArgs {
  let values: {
    quick?: boolean;
    capacity?: boolean;
    out?: string;
    only?: string;
    render?: string;
  };
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: {
        quick: { type: "boolean" },
        capacity: { type: "boolean" },
        out: { type: "string" },
        only: { type: "string" },
        render: { type: "string" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new TypeError(
      `Cannot run the benchmark as the arguments are not ${USAGE}: current value is ${
        JSON.stringify(args.join(" "))
      }`,
      { cause: error },
    );
  }
  if (values.quick && values.capacity) {
    throw new TypeError(
      `Cannot run the benchmark as --quick and --capacity are two different runs: current value is "${
        args.join(" ")
      }"`,
    );
  }
  const phases: string[] = values.only !== undefined
    ? values.only.split(",").map((p) => p.trim())
    : values.capacity
    ? [...CAPACITY_PHASES]
    : [...PHASES];
  const unknown = phases.filter((p) => !(PHASES as readonly string[]).includes(p));
  if (unknown.length > 0) {
    throw new TypeError(
      `Cannot run the benchmark as --only takes ${
        PHASES.join(",")
      }: current value is "${values.only}"`,
    );
  }
  const variantDir = values.quick ? "/quick" : values.capacity ? "/capacity" : "";
  return {
    quick: values.quick ?? false,
    capacity: values.capacity ?? false,
    out: values.out ?? `${REPO_DIR}/tools/bench/results${variantDir}`,
    phases: PHASES.filter((p) => phases.includes(p)),
    ...(values.render === undefined ? {} : { render: values.render }),
  };
}

function loadAverage(): number {
  return Deno.loadavg()[0] ?? Number.NaN;
}

/**
 * Runs `deno fmt` on the written files, so that committing them keeps
 * `deno fmt --check` green (it pads Markdown tables, for one).
 */
async function formatOutputs(paths: readonly string[], progress: Progress): Promise<void> {
  const result = await new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--quiet", ...paths],
    cwd: REPO_DIR,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!result.success) {
    progress.step(
      `deno fmt could not format the report: ${new TextDecoder().decode(result.stderr)}`,
    );
  }
}

/**
 * Writes results.json, chart.svg and report.md into `out`, prints the checks
 * and the targets' verdicts, and returns the checks.
 */
async function writeOutputs(
  results: BenchResults,
  out: string,
  progress: Progress,
): Promise<Check[]> {
  const verdicts = evaluateTargets(results);
  const checks = checkResults(results);
  await Deno.mkdir(out, { recursive: true });
  const paths = ["results.json", "chart.svg", "report.md"].map((name) => `${out}/${name}`);
  await Deno.writeTextFile(paths[0]!, JSON.stringify(results, null, 2) + "\n");
  await Deno.writeTextFile(paths[1]!, await renderSvg(chartSpec(results)));
  await Deno.writeTextFile(paths[2]!, renderReport(results, verdicts));
  const inputs = capacityInputs(results);
  if (inputs !== undefined) {
    paths.push(`${out}/capacity.svg`);
    await Deno.writeTextFile(
      paths[3]!,
      await renderSvg(
        capacityChartSpec(
          capacityModel(inputs),
          `Capacity model: users/s by units of each tier (${results.run.variant} run, ${
            results.run.startedAt.slice(0, 16)
          })`,
        ),
      ),
    );
  }
  await formatOutputs(paths, progress);
  for (const c of checks) {
    progress.step(`[${c.ok ? "  ok " : " FAIL"}] ${c.phase}: ${c.rule} — ${c.measured}`);
  }
  for (const v of verdicts) {
    const mark = v.met === undefined ? "  -  " : v.met ? " met " : " MISS";
    progress.step(`[${mark}] ${v.phase}: ${v.target} — ${v.measured}`);
  }
  return checks;
}

/** Runs the benchmark (or re-renders a run) and returns whether checks ran and every one held. */
async function main(args: BenchArgs): Promise<boolean> {
  if (args.render !== undefined) {
    // Re-render the report and chart of an earlier run, measuring nothing.
    const results: BenchResults = JSON.parse(await Deno.readTextFile(args.render));
    const checks = await writeOutputs(results, args.out, new Progress());
    console.log(checksSummary(checks));
    return checksHeld(checks);
  }
  installInterruptHandler();
  const plan = args.quick ? QUICK_PLAN : args.capacity ? CAPACITY_PLAN : FULL_PLAN;
  const progress = new Progress();
  const startedAt = new Date();
  const loadBefore = loadAverage();
  progress.phase(
    `benchmark, ${plan.variant} run: ${args.phases.join(", ")}; 1-min load average ${loadBefore}`,
  );
  const versions = await checkTools(args.phases);
  progress.step(
    Object.entries(versions).map(([tool, version]) => `${tool} ${version}`).join(", "),
  );
  const generator = `oha ${versions.oha ?? "?"}`;
  const workDir = await Deno.makeTempDir({ prefix: "bench-" });
  const skipped = PHASES.filter((p) => !args.phases.includes(p)).map((p) => `${p} (not asked)`);
  let results: Omit<BenchResults, "run"> = { skipped };
  try {
    if (args.phases.some((p) => p !== "e2e" && p !== "bulk")) {
      progress.phase("starting Redis and PostgreSQL (the repo's configuration) and migrating");
      await using services = await startBenchServices();
      progress.step(
        `redis ${services.redisServer.url}, postgres 127.0.0.1:${services.postgresServer.port}`,
      );
      if (args.phases.includes("ingest")) {
        progress.phase("1. ingest: POST /users on one API process");
        results = {
          ...results,
          ingest: await runIngest(services, plan.ingest, progress, workDir, generator),
        };
      }
      if (args.phases.includes("traefik")) {
        progress.phase("1b. ingest through Traefik: its ceiling, our API, the course's producer");
        results = {
          ...results,
          traefik: await runThroughTraefik(services, plan.traefik, progress),
        };
      }
      if (args.phases.includes("drain")) {
        progress.phase("2. drain: consumers against the drain floor (an insert from memory)");
        results = { ...results, drain: await runDrain(services, plan.drain, progress, workDir) };
      }
      if (args.phases.includes("growth")) {
        progress.phase("4. growth: memory against backlog and overload");
        results = {
          ...results,
          growth: await runGrowth(services, plan.growth, progress, generator),
        };
      }
      progress.step("stopping Redis and PostgreSQL");
    }
    if (args.phases.includes("e2e")) {
      progress.phase("3. end to end through Traefik at open-model rates up to its ceiling");
      results = {
        ...results,
        endToEnd: await runEndToEnd(plan.endToEnd, progress, {
          ceiling: results.traefik?.ceiling,
          generator,
        }),
      };
    }
    if (args.phases.includes("bulk")) {
      progress.phase("5. bulk: POST /users/batch through Traefik, 1 to 1000 users per request");
      results = { ...results, bulk: await runBulk(plan.bulk, progress, { generator, workDir }) };
    }
  } finally {
    await Deno.remove(workDir, { recursive: true }).catch(() => {});
  }

  progress.phase(`writing the report to ${args.out}`);
  const full: BenchResults = {
    run: {
      variant: plan.variant,
      startedAt: startedAt.toISOString(),
      seconds: progress.elapsedSeconds,
      cores: navigator.hardwareConcurrency,
      loadBefore,
      versions,
    },
    ...results,
  };
  const checks = await writeOutputs(full, args.out, progress);
  progress.phase(
    `done in ${(progress.elapsedSeconds / 60).toFixed(1)} min, ${
      checksSummary(checks)
    }: ${args.out}/report.md, chart.svg, results.json`,
  );
  return checksHeld(checks);
}

if (import.meta.main) {
  let args: BenchArgs;
  try {
    args = parseBenchArgs(Deno.args);
  } catch (error) {
    console.error(error instanceof Error ? error.message : error);
    Deno.exit(2);
  }
  let held: boolean;
  try {
    held = await main(args);
  } catch (error) {
    console.error("benchmark failed:", error);
    Deno.exit(1);
  }
  if (!held) Deno.exit(1);
}
