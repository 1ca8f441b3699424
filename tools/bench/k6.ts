/**
 * Running k6 with `post_users_k6.js` and reading the summary it writes. k6 is
 * the tool of the scripts users run (tests/*-k6.js); here it drives the
 * overload of one API (an open model at a rate k6 can make) and the check of
 * k6 against wrk on the reference. Its JavaScript VUs cost far more CPU per
 * request than the stack does, so the closed-loop ingest runs use wrk and the
 * runs through Traefik (up to its ceiling) use oha (oha.ts).
 *
 * @module
 */

import { REPO_DIR } from "@users-pipeline/harness/repo";
import { readCpuSeconds } from "./process_stats.ts";

/** What one k6 run measured. */
export interface K6Result {
  /** Requests sent (whatever their outcome). */
  readonly requests: number;
  /** Answered 202. */
  readonly accepted: number;
  /** Answered 503 (queue full or unavailable). */
  readonly rejected: number;
  /** Any other status, or no answer at all. */
  readonly failed: number;
  /** Iterations k6 could not start on schedule (no free VU): offered load it did not send. */
  readonly dropped: number;
  /** The test's length as k6 timed it. */
  readonly seconds: number;
  /** `http_req_duration` percentiles in milliseconds. */
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number };
  /** CPU seconds k6 itself used (sampled every 250 ms, so the last moments may be missed). */
  readonly cpuSeconds?: number;
  /**
   * The thresholds of `post_users_k6.js` that were crossed, as `metric: expression`
   * (`users_failed: count==0`); empty when every request was answered 202 or 503.
   * Absent in results written before thresholds were read.
   */
  readonly crossed?: readonly string[];
}

interface Summary {
  state?: { testRunDurationMs?: number };
  metrics: Record<
    string,
    { values: Record<string, number>; thresholds?: Record<string, { ok: boolean }> } | undefined
  >;
}

/** k6's exit code when the run completed but a threshold was crossed. */
const THRESHOLDS_CROSSED = 99;

/**
 * Reads the JSON that `handleSummary` in `post_users_k6.js` writes.
 *
 * @throws {TypeError} when it has no request count or no latency trend.
 */
export function parseK6Summary(json: string): K6Result {
  const summary = JSON.parse(json) as Summary;
  const metric = (name: string, stat: string) => summary.metrics[name]?.values[stat];
  const requests = metric("http_reqs", "count");
  const p50 = metric("http_req_duration", "med");
  const p90 = metric("http_req_duration", "p(90)");
  const p99 = metric("http_req_duration", "p(99)");
  if (requests === undefined || p50 === undefined || p90 === undefined || p99 === undefined) {
    throw new TypeError(
      `Cannot read k6's summary as it lacks http_reqs or http_req_duration: current value is ${
        JSON.stringify(json.slice(0, 300))
      }`,
    );
  }
  return {
    requests,
    accepted: metric("users_accepted", "count") ?? 0,
    rejected: metric("users_rejected_503", "count") ?? 0,
    failed: metric("users_failed", "count") ?? 0,
    dropped: metric("dropped_iterations", "count") ?? 0,
    seconds: (summary.state?.testRunDurationMs ?? 0) / 1_000,
    latencyMs: { p50, p90, p99 },
    crossed: Object.entries(summary.metrics).flatMap(([name, metric]) =>
      Object.entries(metric?.thresholds ?? {})
        .filter(([, threshold]) => !threshold.ok)
        .map(([expression]) => `${name}: ${expression}`)
    ),
  };
}

/** Options of {@linkcode runK6}. */
export interface K6Options {
  /** How long to load. */
  seconds: number;
  /** Requests per second (open model). Exactly one of `rate` and `vus`. */
  rate?: number;
  /** Looping VUs (closed model), instead of `rate`. */
  vus?: number;
  /** VUs allocated before the start (open model). @default rate / 20, at least 20 */
  preAllocatedVUs?: number;
  /** Most VUs (open model): bounds the requests in flight. @default rate / 2, at least 100 */
  maxVUs?: number;
  /** The k6 program. @default "k6" */
  command?: string;
}

/**
 * The VUs of an arrival-rate run: a twentieth of the rate pre-allocated (at
 * least 20), up to half of it (at least 100), unless `options` say otherwise;
 * never more pre-allocated than allowed, which k6 refuses.
 */
export function arrivalVUs(
  rate: number,
  options: Pick<K6Options, "preAllocatedVUs" | "maxVUs"> = {},
): { preAllocated: number; max: number } {
  const max = options.maxVUs ?? Math.max(100, Math.ceil(rate / 2));
  const preAllocated = options.preAllocatedVUs ?? Math.max(20, Math.ceil(rate / 20));
  return { preAllocated: Math.min(preAllocated, max), max };
}

/**
 * POSTs users to `baseUrl` with k6 and returns what it measured, including
 * the thresholds it crossed (k6 then exits 99; the caller judges the run).
 *
 * @throws {Error} with k6's output when it fails otherwise or writes no summary.
 */
export async function runK6(baseUrl: string, options: K6Options): Promise<K6Result> {
  const { seconds, rate, vus, command = "k6" } = options;
  if ((rate === undefined) === (vus === undefined)) {
    throw new TypeError("Cannot run k6 without exactly one of rate and vus");
  }
  const dir = await Deno.makeTempDir({ prefix: "bench-k6-" });
  const summaryPath = `${dir}/summary.json`;
  const env = [
    `BASE_URL=${baseUrl}`,
    `DURATION=${seconds}s`,
    `SUMMARY=${summaryPath}`,
    ...(vus !== undefined ? [`VUS=${vus}`] : [
      `RATE=${rate}`,
      `PRE_VUS=${arrivalVUs(rate!, options).preAllocated}`,
      `MAX_VUS=${arrivalVUs(rate!, options).max}`,
    ]),
  ];
  try {
    const child = new Deno.Command(command, {
      args: [
        "run",
        "--quiet",
        "--no-usage-report",
        // Its REST API would take port 6565, which another k6 may hold.
        "--address",
        "127.0.0.1:0",
        ...env.flatMap((pair) => ["-e", pair]),
        `${REPO_DIR}/tools/bench/post_users_k6.js`,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // k6's own CPU, read while it runs: once it has exited /proc no longer has it.
    let cpuSeconds = 0;
    const sampler = setInterval(async () => {
      cpuSeconds = (await readCpuSeconds(child.pid)) ?? cpuSeconds;
    }, 250);
    const result = await child.output().finally(() => clearInterval(sampler));
    const decoder = new TextDecoder();
    const text = decoder.decode(result.stdout) + decoder.decode(result.stderr);
    if (!result.success && result.code !== THRESHOLDS_CROSSED) {
      throw new Error(`Cannot load ${baseUrl} as k6 exited with ${result.code}:\n${text}`);
    }
    return { ...parseK6Summary(await Deno.readTextFile(summaryPath)), cpuSeconds };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
