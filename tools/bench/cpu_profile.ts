/**
 * Summarising a V8 CPU profile (the `.cpuprofile` JSON `deno run --cpu-prof`
 * writes at exit): where the process spent its own time, by function and by
 * origin (our modules, each npm package, each Deno extension, GC, idle), so
 * the report can say what holds a path back before anyone optimises it.
 *
 * @module
 */

/** The parts of a `.cpuprofile` this module reads. */
export interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      readonly lineNumber: number;
    };
  }[];
  /** The node sampled at each tick. */
  readonly samples: readonly number[];
  /** Microseconds since the previous sample, one per sample. */
  readonly timeDeltas: readonly number[];
}

/** Self time of one function or one origin. */
export interface SelfTime {
  /** `name (location)` for a function, the origin's name for an origin. */
  readonly label: string;
  readonly selfMs: number;
  /** Share of the busy time (every sample but idle), 0–1. */
  readonly share: number;
}

/** What {@linkcode summariseCpuProfile} returns. */
export interface ProfileSummary {
  /** Sampled time, idle included. */
  readonly totalMs: number;
  /** Share of the sampled time the process was idle (waiting on I/O), 0–1. */
  readonly idleShare: number;
  /** The functions with the most self time, most first. */
  readonly frames: readonly SelfTime[];
  /** Self time by origin, most first. */
  readonly origins: readonly SelfTime[];
}

const NPM_PATH = /\/npm\/[^/]+\/((?:@[^/]+\/)?[^/]+)\/[^/]+\/(.*)$/;

/**
 * Where a frame's code comes from: `npm:<package>`, `deno:<extension>`,
 * `node:<module>`, a repo-relative path for our own modules, or V8's own
 * pseudo-frames (`(garbage collector)`, `(program)`, `(idle)`).
 */
export function originOf(url: string, functionName: string, repoUrl = ""): string {
  if (url === "") return functionName.startsWith("(") ? functionName : "(native)";
  const npm = NPM_PATH.exec(url);
  if (npm) return `npm:${npm[1]}`;
  if (url.startsWith("ext:")) return `deno:${url.slice(4).split("/")[0]}`;
  if (url.startsWith("node:")) return url;
  if (repoUrl !== "" && url.startsWith(repoUrl)) return url.slice(repoUrl.length);
  return url;
}

/** `file.js:line` for a frame, npm and repo paths shortened. */
function locationOf(url: string, line: number, repoUrl: string): string {
  if (url === "") return "";
  const npm = NPM_PATH.exec(url);
  const path = npm
    ? `${npm[1]}/${npm[2]}`
    : repoUrl !== "" && url.startsWith(repoUrl)
    ? url.slice(repoUrl.length)
    : url;
  return `${path}:${line + 1}`;
}

/** Options of {@linkcode summariseCpuProfile}. */
export interface SummaryOptions {
  /** How many functions and origins to keep. @default 10 */
  top?: number;
  /** The repo's `file://` URL with a trailing slash, to shorten our own paths. @default "" */
  repoUrl?: string;
}

/** Self time by function and by origin. */
export function summariseCpuProfile(
  profile: CpuProfile,
  options: SummaryOptions = {},
): ProfileSummary {
  const { top = 10, repoUrl = "" } = options;
  const nodes = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const byFrame = new Map<string, number>();
  const byOrigin = new Map<string, number>();
  let totalUs = 0;
  let idleUs = 0;
  profile.samples.forEach((id, index) => {
    const us = profile.timeDeltas[index] ?? 0;
    const frame = nodes.get(id);
    if (frame === undefined || us <= 0) return;
    totalUs += us;
    if (frame.functionName === "(idle)") {
      idleUs += us;
      return;
    }
    const location = locationOf(frame.url, frame.lineNumber, repoUrl);
    const label = `${frame.functionName || "(anonymous)"}${location ? ` (${location})` : ""}`;
    byFrame.set(label, (byFrame.get(label) ?? 0) + us);
    const origin = originOf(frame.url, frame.functionName, repoUrl);
    byOrigin.set(origin, (byOrigin.get(origin) ?? 0) + us);
  });
  const busyUs = totalUs - idleUs;
  const rank = (times: Map<string, number>): SelfTime[] =>
    [...times].sort((a, b) => b[1] - a[1]).slice(0, top).map(([label, us]) => ({
      label,
      selfMs: us / 1_000,
      share: busyUs > 0 ? us / busyUs : 0,
    }));
  return {
    totalMs: totalUs / 1_000,
    idleShare: totalUs > 0 ? idleUs / totalUs : 0,
    frames: rank(byFrame),
    origins: rank(byOrigin),
  };
}

/** Reads and summarises the newest `.cpuprofile` in `dir`, or undefined when there is none. */
export async function summariseProfileDir(
  dir: string,
  options: SummaryOptions = {},
): Promise<ProfileSummary | undefined> {
  let newest: { path: string; mtime: number } | undefined;
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isFile || !entry.name.endsWith(".cpuprofile")) continue;
    const path = `${dir}/${entry.name}`;
    const mtime = (await Deno.stat(path)).mtime?.getTime() ?? 0;
    if (newest === undefined || mtime > newest.mtime) newest = { path, mtime };
  }
  if (newest === undefined) return undefined;
  const profile = JSON.parse(await Deno.readTextFile(newest.path)) as CpuProfile;
  return summariseCpuProfile(profile, options);
}
