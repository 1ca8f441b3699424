/**
 * What a process uses, from `/proc`: its resident memory (`/proc/<pid>/status`,
 * once or sampled on a timer while a measurement runs), the CPU time it and
 * its children have consumed (`/proc/<pid>/stat`), and the whole machine's
 * (`/proc/stat`), to tell which part was CPU-bound.
 *
 * Deno lets a program read another process's `/proc` files only with
 * `--allow-all`, so the files are read by one `grep` per reading (the
 * benchmark already may run programs), which also reads many at once.
 *
 * @module
 */

import { delay } from "@users-pipeline/harness/wait";

/** Clock ticks per second of `/proc`'s CPU times (`getconf CLK_TCK`: 100 on Linux). */
const CLOCK_TICKS_PER_SECOND = 100;

/**
 * The lines of the `/proc` files matching the shell glob `pattern` that match
 * the regular expression `lines`, by file. Files that vanish meanwhile are
 * skipped.
 */
export async function readProc(pattern: string, lines = ""): Promise<Map<string, string[]>> {
  const { stdout } = await new Deno.Command("sh", {
    // -H: prefix each line with its file; the glob is expanded by the shell.
    args: ["-c", `grep -H -e "$1" ${pattern} 2>/dev/null; true`, "sh", lines],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).output();
  const byFile = new Map<string, string[]>();
  for (const line of new TextDecoder().decode(stdout).split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const file = line.slice(0, colon);
    byFile.set(file, [...byFile.get(file) ?? [], line.slice(colon + 1)]);
  }
  return byFile;
}

/** User plus system CPU seconds in a `/proc/<pid>/stat` text (fields 14 and 15). */
export function parseCpuSeconds(stat: string): number {
  // The command name in parentheses may contain spaces and parentheses.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const [utime, stime] = [Number(fields[11]), Number(fields[12])];
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) {
    throw new TypeError(
      `Cannot read CPU times as the stat has too few fields: current value is ${
        JSON.stringify(stat)
      }`,
    );
  }
  return (utime + stime) / CLOCK_TICKS_PER_SECOND;
}

/** The parent pid in a `/proc/<pid>/stat` text. */
function parentOf(stat: string): number {
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/** The CPU seconds `pid` has used so far, or undefined once it is gone. */
export async function readCpuSeconds(pid: number): Promise<number | undefined> {
  const stat = (await readProc(`/proc/${pid}/stat`)).get(`/proc/${pid}/stat`)?.[0];
  return stat === undefined ? undefined : parseCpuSeconds(stat);
}

/**
 * The CPU seconds used so far by each root and its descendants (a PostgreSQL
 * postmaster and its backends, `deno task` and the Deno it runs), in the
 * order of `roots`. Children that already exited are not counted, so read it
 * around a window in which they live.
 */
export async function readTreeCpuSeconds(roots: readonly number[]): Promise<number[]> {
  const stats = await readProc("/proc/[0-9]*/stat");
  const children = new Map<number, number[]>();
  const cpu = new Map<number, number>();
  for (const [file, [stat]] of stats) {
    if (stat === undefined) continue;
    const pid = Number(file.split("/")[2]);
    const ppid = parentOf(stat);
    cpu.set(pid, parseCpuSeconds(stat));
    children.set(ppid, [...children.get(ppid) ?? [], pid]);
  }
  return roots.map((root) => {
    if (!cpu.has(root)) return 0;
    const tree = [root];
    for (let i = 0; i < tree.length; i++) tree.push(...children.get(tree[i]!) ?? []);
    return tree.reduce((sum, pid) => sum + (cpu.get(pid) ?? 0), 0);
  });
}

/** The `VmRSS` of a `/proc/<pid>/status` text (or of its VmRSS line), in KiB. */
export function parseVmRssKiB(status: string): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!match) {
    throw new TypeError(
      `Cannot read VmRSS as the status has no such line: current value is ${
        JSON.stringify(status.slice(0, 200))
      }`,
    );
  }
  return Number(match[1]);
}

/** The resident memory of `pid` in MiB, or undefined once the process is gone. */
export async function readRssMiB(pid: number): Promise<number | undefined> {
  const file = `/proc/${pid}/status`;
  const line = (await readProc(file, "^VmRSS:")).get(file)?.[0];
  return line === undefined ? undefined : parseVmRssKiB(line) / 1024;
}

/** The whole machine's CPU time so far, from the `cpu` line of `/proc/stat`. */
export interface MachineCpu {
  /** Seconds spent not idle, summed over every core. */
  readonly busySeconds: number;
  /** Seconds of every kind, summed over every core. */
  readonly totalSeconds: number;
}

/** Reads the `cpu` line of a `/proc/stat` text (idle and iowait count as not busy). */
export function parseMachineCpu(stat: string): MachineCpu {
  const line = stat.split("\n").find((l) => l.startsWith("cpu "));
  const ticks = line?.trim().split(/\s+/).slice(1, 9).map(Number) ?? [];
  if (ticks.length < 5 || ticks.some((t) => !Number.isFinite(t))) {
    throw new TypeError(
      `Cannot read the machine's CPU times as /proc/stat has no cpu line: current value is ${
        JSON.stringify(stat.slice(0, 100))
      }`,
    );
  }
  const total = ticks.reduce((sum, t) => sum + t, 0);
  const idle = ticks[3]! + ticks[4]!;
  return {
    busySeconds: (total - idle) / CLOCK_TICKS_PER_SECOND,
    totalSeconds: total / CLOCK_TICKS_PER_SECOND,
  };
}

/** The machine's CPU time so far. */
export async function readMachineCpu(): Promise<MachineCpu> {
  return parseMachineCpu(
    ((await readProc("/proc/stat", "^cpu ")).get("/proc/stat") ?? []).join("\n"),
  );
}

/** One sample of {@linkcode sampleRss}. */
export interface RssSample {
  /** Milliseconds since sampling started. */
  readonly ms: number;
  readonly mib: number;
  /** The progress counter at the time of the sample, when one was given. */
  readonly done?: number;
}

/** A running sampler; `stop()` resolves with every sample taken. */
export interface RssSampler {
  stop(): Promise<RssSample[]>;
}

/**
 * Samples the resident memory of `pid` every `intervalMs` (and once at
 * once), with the value of `progress` (rows done, say) at each sample.
 */
export function sampleRss(
  pid: number,
  intervalMs: number,
  progress?: () => number,
): RssSampler {
  const start = performance.now();
  const samples: RssSample[] = [];
  let stopped = false;
  const take = async () => {
    const ms = performance.now() - start;
    const done = progress?.();
    const mib = await readRssMiB(pid);
    if (mib !== undefined) samples.push(done === undefined ? { ms, mib } : { ms, mib, done });
  };
  const loop = (async () => {
    while (!stopped) {
      const next = performance.now() + intervalMs;
      await take();
      await delay(Math.max(0, next - performance.now()));
    }
  })();
  let stopping: Promise<RssSample[]> | undefined;
  return {
    stop() {
      stopping ??= (async () => {
        stopped = true;
        await loop;
        await take();
        return samples;
      })();
      return stopping;
    },
  };
}

/** The largest sample's MiB, or 0 for none. */
export function peakMiB(samples: readonly RssSample[]): number {
  return samples.reduce((max, sample) => Math.max(max, sample.mib), 0);
}
