/**
 * Running the API, the consumer and the reference server as the benchmark's
 * own child processes. The command of a `deno.json` task is run with
 * `deno run` directly, not through `deno task`, so that the child's pid is
 * the Deno process itself (its `/proc/<pid>/status` is the service's memory)
 * and so that profiling flags can be added in front of the task's own.
 *
 * @module
 */

import { OutputBuffer } from "@users-pipeline/harness/line_output";
import { freePort } from "@users-pipeline/harness/ports";
import { ServiceProcess } from "@users-pipeline/harness/service_process";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { waitForHttp } from "@users-pipeline/harness/wait";
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

/**
 * The environment of a consumer: `env` and a free PORT for its /healthz and
 * /readyz, so that consumers side by side (and an API) never share one.
 */
export function consumerEnv(env: Record<string, string>): Record<string, string> {
  return { ...env, PORT: String(freePort()) };
}

/** The HTTP floor (`http_floor.ts`): `Deno.serve` + Hono answering 202, nothing else. */
export const HTTP_FLOOR_COMMAND =
  "deno run --cached-only --allow-net --allow-env tools/bench/http_floor.ts";

/**
 * A diagnostic, not a floor: the API's app without Redis (`reference_server.ts`), with the API's
 * permissions.
 */
export const REFERENCE_SERVER_COMMAND =
  "deno run --cached-only --allow-net --allow-env tools/bench/reference_server.ts";

/**
 * The course's first version, an INSERT per request (`direct_server.ts`), with the API's
 * permissions.
 */
export const DIRECT_SERVER_COMMAND =
  "deno run --cached-only --allow-net --allow-env --allow-sys=hostname,osRelease,networkInterfaces tools/bench/direct_server.ts";

/** The course's producer (what the ingest targets compare with): Hono and ioredis, nothing else. */
export const COURSE_PRODUCER_COMMAND =
  "deno run --cached-only --allow-net --allow-env tools/bench/course_producer.ts";

/** The course's consumer (what single mode is compared with): BRPOP, one INSERT per item. */
export const COURSE_CONSUMER_COMMAND =
  "deno run --cached-only --allow-net --allow-env --allow-sys=hostname,osRelease,networkInterfaces tools/bench/course_consumer.ts";

/** Options of {@linkcode startDenoProcess}. */
export interface DenoProcessOptions {
  /** Added to the benchmark's own environment. */
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
  /** Its last output lines. */
  readonly output: OutputBuffer;
  /** SIGTERM, then SIGKILL after 30 s; resolves with the exit status. A second call returns the first promise. */
  stop(): Promise<Deno.CommandStatus | undefined>;
}

/**
 * Starts `deno run …` for `command` (a deno.json task's command) in the repo
 * dir, as a {@linkcode ServiceProcess} that is stopped if the benchmark is interrupted.
 */
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
    env: options.env,
    output: output.sink,
    log: output.sink.bind(null, name),
    restart: "no",
  });
  const pid = process.start();
  const stop = () => process.stop({ timeoutMs: 30_000 }).finally(() => forget());
  const forget = onInterrupt(stop);
  return { name, process, pid, output, stop, [Symbol.asyncDispose]: async () => void await stop() };
}

/** An API (or the reference server) started by {@linkcode startApi}. */
export interface ApiProcess extends DenoProcess {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
}

/**
 * Starts an HTTP service (`command` as in {@linkcode startDenoProcess}) on a
 * free port and waits until its `/readyz` answers 200.
 *
 * @throws {Error} with its last output, after stopping it, when it exits or does not answer in time.
 */
export async function startApi(
  name: string,
  command: string,
  options: DenoProcessOptions,
): Promise<ApiProcess> {
  const port = freePort();
  const api = startDenoProcess(name, command, {
    ...options,
    env: { ...options.env, PORT: String(port) },
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitForHttp(`${url}/readyz`, { alive: () => api.process.running });
  } catch (error) {
    await api.stop();
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`Cannot start ${name}: ${reason}\n${api.output.tail(20)}`, { cause: error });
  }
  return { ...api, url };
}
