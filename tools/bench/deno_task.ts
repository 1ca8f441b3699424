/**
 * Running the API, the consumer and the reference server as the benchmark's
 * own child processes. The command of a `deno.json` task is run with
 * `deno run` directly, not through `deno task`, so that the child's pid is
 * the Deno process itself (its `/proc/<pid>/status` is the service's memory)
 * and so that profiling flags can be added in front of the task's own.
 *
 * @module
 */

import { ServiceProcess } from "../stack/service_process.ts";
import { OutputBuffer, REPO_DIR } from "../harness/services.ts";
import { onInterrupt } from "./interrupt.ts";

/**
 * The arguments after `deno` for a task whose command is `deno run <flags>
 * <module>`, with `extraFlags` placed right after `run`.
 *
 * @throws {TypeError} when the command is not a plain `deno run`.
 */
export function denoRunArgs(command: string, extraFlags: readonly string[] = []): string[] {
  const [program, subcommand, ...rest] = command.trim().split(/\s+/);
  if (program !== "deno" || subcommand !== "run" || rest.length === 0) {
    throw new TypeError(
      `Cannot run a task that is not "deno run <flags> <module>": current value is "${command}"`,
    );
  }
  return ["run", ...extraFlags, ...rest];
}

/** The command of a task in the repo's `deno.json`. */
export function taskCommand(task: string): string {
  const config = JSON.parse(Deno.readTextFileSync(`${REPO_DIR}/deno.json`)) as {
    tasks?: Record<string, string>;
  };
  const command = config.tasks?.[task];
  if (command === undefined) {
    throw new TypeError(`Cannot run task ${task} as deno.json has no such task`);
  }
  return command;
}

/** The reference server: the API's app without Redis, with the API's permissions. */
export const REFERENCE_SERVER_COMMAND =
  "deno run --cached-only --allow-net --allow-env tools/bench/reference_server.ts";

/** Options of {@linkcode startDenoProcess}. */
export interface DenoProcessOptions {
  /** The process's environment (nothing else is inherited but PATH and HOME). */
  env: Record<string, string>;
  /** Write a V8 CPU profile into this dir when the process exits. @default none */
  cpuProfileDir?: string;
}

/** A service started by {@linkcode startDenoProcess}. */
export interface DenoProcess extends AsyncDisposable {
  readonly name: string;
  readonly process: ServiceProcess;
  /** The Deno process's pid (its memory is the service's). */
  readonly pid: number;
  readonly output: OutputBuffer;
  /** SIGTERM, then SIGKILL after 30 s; resolves with the exit status. */
  stop(): Promise<Deno.CommandStatus | undefined>;
}

/** Starts `deno run …` for `command` (a deno.json task's command) in the repo dir. */
export function startDenoProcess(
  name: string,
  command: string,
  options: DenoProcessOptions,
): DenoProcess {
  const flags = options.cpuProfileDir === undefined
    ? []
    : ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDir}`];
  const output = new OutputBuffer();
  const process = new ServiceProcess({
    name,
    command: Deno.execPath(),
    args: denoRunArgs(command, flags),
    cwd: REPO_DIR,
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      HOME: Deno.env.get("HOME") ?? "/root",
      ...options.env,
    },
    output: output.sink,
    log: output.sink.bind(null, name),
    restart: "no",
  });
  const pid = process.start();
  let stopping: Promise<Deno.CommandStatus | undefined> | undefined;
  const stop = () => stopping ??= process.stop({ timeoutMs: 30_000 }).finally(() => forget());
  const forget = onInterrupt(stop);
  return { name, process, pid, output, stop, [Symbol.asyncDispose]: async () => void await stop() };
}

/**
 * Polls `url` until it answers 200.
 *
 * @throws {Error} with the process's last output when it exits or `timeoutMs` passes first.
 */
export async function waitForHealthy(
  url: string,
  service: DenoProcess,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!service.process.running) break;
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`Cannot reach ${url} (${service.name}):\n${service.output.tail(20)}`);
}
