/**
 * Running oha (a Rust HTTP load generator, pinned in
 * tools/stack/install_tools.sh) and reading its JSON report: the benchmark's
 * one load generator. Closed loop (as fast as answers come back) for the
 * ingest runs and Traefik's ceiling; an open model (`-q`, a fixed request
 * rate, with `--latency-correction` so a late request's latency counts from
 * when it was due, not from when it was sent) end to end and under overload.
 * It costs a few µs of CPU per request where k6's JavaScript VUs cost far
 * more (k6 ran out of CPU at ~2,000 req/s on two cores), and its own CPU is
 * read and reported next to the stack's. k6 stays the tool of the scripts
 * users run (tests/k6/).
 *
 @module
 */

/** What one load run measured. */
export interface LoadResult {
  /** Requests sent and answered or failed. */
  readonly requests: number;
  /** Answered 202. */
  readonly accepted: number;
  /** Answered 503. */
  readonly rejected: number;
  /** Any other status, or no answer at all. */
  readonly failed: number;
  /**
   * Requests of an open-model run that were not sent in its time (the
   * generator fell behind its schedule): `rate × seconds - requests`.
   */
  readonly dropped: number;
  /** The run's length as the generator timed it. */
  readonly seconds: number;
  /** Latency percentiles in milliseconds (from each request's due time under `-q`). */
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number };
  /** The slowest answer in milliseconds, timed as the percentiles are; NaN when oha gave none. */
  readonly slowestMs: number;
  /** CPU seconds the generator itself used. */
  readonly cpuSeconds?: number;
}

/** The part of oha's `--output-format json` report that is read. */
interface OhaReport {
  summary?: { total?: number; slowest?: number | null; requestsPerSec?: number };
  latencyPercentiles?: Record<string, number | null>;
  statusCodeDistribution?: Record<string, number>;
  errorDistribution?: Record<string, number>;
}

/**
 * Reads oha's JSON report (`--output-format json`). `rate` and `seconds` are
 * what an open-model run asked for (to count what was not sent); without
 * them nothing counts as dropped.
 *
 * @throws {TypeError} when the report lacks the summary, the percentiles or the status counts.
 */
export function parseOhaReport(
  json: string,
  asked: { rate?: number; seconds?: number } = {},
): LoadResult {
  const report = JSON.parse(json) as OhaReport;
  const total = report.summary?.total;
  const percentiles = report.latencyPercentiles;
  const statuses = report.statusCodeDistribution;
  if (total === undefined || percentiles === undefined || statuses === undefined) {
    throw new TypeError(
      `Cannot read oha's report as it lacks the summary, percentiles or status codes: current value is ${
        JSON.stringify(json.slice(0, 300))
      }`,
    );
  }
  const answered = Object.values(statuses).reduce((sum, n) => sum + n, 0);
  const errors = Object.values(report.errorDistribution ?? {}).reduce((sum, n) => sum + n, 0);
  const accepted = statuses["202"] ?? 0;
  const rejected = statuses["503"] ?? 0;
  const requests = answered + errors;
  const ms = (key: string) => (percentiles[key] ?? Number.NaN) * 1_000;
  return {
    requests,
    accepted,
    rejected,
    failed: requests - accepted - rejected,
    dropped: asked.rate !== undefined && asked.seconds !== undefined
      ? Math.max(0, Math.round(asked.rate * asked.seconds) - requests)
      : 0,
    seconds: total,
    latencyMs: { p50: ms("p50"), p90: ms("p90"), p99: ms("p99") },
    slowestMs: (report.summary?.slowest ?? Number.NaN) * 1_000,
  };
}

/** Options of {@linkcode runOha}. */
export interface OhaOptions {
  /** How long to send. */
  seconds: number;
  /** Requests per second (open model, latency-corrected); closed loop without it. @default none */
  rate?: number;
  /** Connections, each with at most one request in flight. @default 64 */
  connections?: number;
  /** The oha program. @default "oha" */
  command?: string;
  /**
   * Record every answer's status and body length in this SQLite file (oha's `--db-url`, table
   * `oha`), to tell whose each 503 was (refusals.ts). @default none
   */
  dbPath?: string;
  /** Send this file as every request's body instead of {@linkcode POST_BODY}. @default none */
  bodyPath?: string;
  /** More request headers, each `Name: value`. @default none */
  headers?: readonly string[];
}

/** The body every request sends: the course's curl's. */
export const POST_BODY = '{"name": "Queueing"}';

/** oha's arguments for a run of `POST <url>` (exported for the test). */
export function ohaArgs(url: string, options: OhaOptions): string[] {
  const { seconds, rate, connections = 64, dbPath, bodyPath, headers = [] } = options;
  return [
    "--no-tui",
    "--output-format",
    "json",
    "-z",
    `${seconds}s`,
    "-c",
    String(connections),
    // A request still in flight when the time is up is awaited, not cancelled: the server may
    // have accepted it, and stored = accepted counts every one.
    "--wait-ongoing-requests-after-deadline",
    ...(rate === undefined ? [] : ["-q", String(rate), "--latency-correction"]),
    ...(dbPath === undefined ? [] : ["--db-url", dbPath]),
    "-t",
    "10s",
    "-m",
    "POST",
    "-T",
    "application/json",
    ...headers.flatMap((header) => ["-H", header]),
    ...(bodyPath === undefined ? ["-d", POST_BODY] : ["-D", bodyPath]),
    url,
  ];
}

/**
 * POSTs users to `url` (a full URL, `…/users`) with oha and returns what it
 * measured, with its own CPU time.
 *
 * @throws {Error} with oha's output when it exits non-zero or prints no report.
 */
export async function runOha(url: string, options: OhaOptions): Promise<LoadResult> {
  // bash's `times` prints its children's user and system CPU when oha has exited: exact, where
  // sampling /proc while it runs would miss its last moments.
  const result = await new Deno.Command("bash", {
    args: [
      "-c",
      'status=0; "$@" || status=$?; times >&2; exit $status',
      "bash",
      options.command ?? "oha",
      ...ohaArgs(url, options),
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  const stdout = decoder.decode(result.stdout);
  const stderr = decoder.decode(result.stderr);
  if (!result.success) {
    throw new Error(`Cannot load ${url} as oha exited with ${result.code}:\n${stdout}${stderr}`);
  }
  try {
    return { ...parseOhaReport(stdout, options), cpuSeconds: parseChildTimes(stderr) };
  } catch (error) {
    throw new Error(`Cannot load ${url} as oha printed no report:\n${stdout}${stderr}`, {
      cause: error,
    });
  }
}

/** Seconds of a bash `times` figure: `1m2.500s`. */
function timesSeconds(text: string): number {
  const match = /^(\d+)m([\d.]+)s$/.exec(text);
  return match ? Number(match[1]) * 60 + Number(match[2]) : Number.NaN;
}

/**
 * The children's user plus system CPU seconds from the output of bash's
 * `times` (its last two lines: the shell's, then its children's).
 *
 * @throws {TypeError} when the text does not end with them.
 */
export function parseChildTimes(text: string): number {
  const lines = text.trim().split("\n");
  const [user, system] = (lines.at(-1) ?? "").trim().split(/\s+/).map(timesSeconds);
  if (
    lines.length < 2 || user === undefined || system === undefined || !(user >= 0 && system >= 0)
  ) {
    throw new TypeError(
      `Cannot read the load generator's CPU time as bash's times printed no such line: current value is ${
        JSON.stringify(text.slice(-200))
      }`,
    );
  }
  return user + system;
}
