/**
 * Running wrk (a closed-loop HTTP load generator written in C) and reading
 * its text report. wrk is the ingest benchmark's load generator: on two
 * cores it needs a fraction of the CPU k6 needs for the same request rate,
 * so the server, not the load generator, is what runs out of CPU.
 *
 * @module
 */

/** What one wrk run measured. */
export interface WrkResult {
  /** Requests completed (whatever their status). */
  readonly requests: number;
  /** The run's length as wrk timed it. */
  readonly seconds: number;
  /** wrk's `Requests/sec`. */
  readonly requestsPerSecond: number;
  /** Latency percentiles in milliseconds (`--latency`). */
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number };
  /** Responses whose status was not 2xx or 3xx. */
  readonly non2xx: number;
  /** Connect, read, write and timeout errors, added up. */
  readonly socketErrors: number;
}

const TIME_UNITS_MS: Record<string, number> = {
  us: 0.001,
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds from one of wrk's times (`536.00us`, `1.56ms`, `1.02s`, `2.00m`). */
export function parseWrkTime(text: string): number {
  const match = /^([\d.]+)(us|ms|s|m|h)$/.exec(text.trim());
  if (!match) {
    throw new TypeError(
      `Cannot read a wrk time as it has no known unit: current value is "${text}"`,
    );
  }
  return Number(match[1]) * TIME_UNITS_MS[match[2]!]!;
}

/**
 * Reads wrk's text report (run with `--latency`).
 *
 * @throws {TypeError} when the report lacks the request count, the rate or the percentiles.
 */
export function parseWrkOutput(text: string): WrkResult {
  const total = /(\d+) requests in ([\d.]+\w+),/.exec(text);
  const rate = /Requests\/sec:\s+([\d.]+)/.exec(text);
  const percentile = (p: number) => {
    const match = new RegExp(`^\\s+${p}%\\s+(\\S+)`, "m").exec(text);
    return match ? parseWrkTime(match[1]!) : undefined;
  };
  const [p50, p90, p99] = [percentile(50), percentile(90), percentile(99)];
  if (!total || !rate || p50 === undefined || p90 === undefined || p99 === undefined) {
    throw new TypeError(
      `Cannot read wrk's report as it lacks the totals or the latency distribution: current value is ${
        JSON.stringify(text.slice(0, 400))
      }`,
    );
  }
  const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(text);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  return {
    requests: Number(total[1]),
    seconds: parseWrkTime(total[2]!) / 1_000,
    requestsPerSecond: Number(rate[1]),
    latencyMs: { p50, p90, p99 },
    non2xx: non2xx ? Number(non2xx[1]) : 0,
    socketErrors: socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0,
  };
}

/** Options of {@linkcode runWrk}. */
export interface WrkOptions {
  /** The Lua script that shapes the request. */
  script: string;
  /** How long to load. */
  seconds: number;
  /** Open connections (each has at most one request in flight). @default 64 */
  connections?: number;
  /** wrk threads. @default 1 */
  threads?: number;
  /** The wrk program. @default "wrk" */
  command?: string;
}

/**
 * Loads `url` with wrk and returns what it measured.
 *
 * @throws {Error} with wrk's output when it exits non-zero or prints no report.
 */
export async function runWrk(url: string, options: WrkOptions): Promise<WrkResult> {
  const { script, seconds, connections = 64, threads = 1, command = "wrk" } = options;
  const result = await new Deno.Command(command, {
    args: [
      `-t${threads}`,
      `-c${connections}`,
      `-d${seconds}s`,
      "--timeout",
      "5s",
      "--latency",
      "-s",
      script,
      url,
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  const text = decoder.decode(result.stdout) + decoder.decode(result.stderr);
  if (!result.success) {
    throw new Error(`Cannot load ${url} as wrk exited with ${result.code}:\n${text}`);
  }
  try {
    return parseWrkOutput(text);
  } catch (error) {
    throw new Error(`Cannot load ${url} as wrk printed no report:\n${text}`, { cause: error });
  }
}
