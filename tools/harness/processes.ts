/**
 * Our own services as real processes in tests: the same `deno task`
 * entrypoints compose and `./stack` run, as a {@linkcode ServiceProcess} (the
 * one child-process wrapper of the tooling) that keeps every output line.
 *
 * @module
 */

import { ServiceProcess } from "./service_process.ts";
import { REPO_DIR } from "./repo.ts";

/**
 * The `deno.json` tasks that run one of our services, and the test suite's
 * consumer that crashes where it is told to (`tests/support/crashing_consumer.ts`).
 */
export type ServiceTask = "server" | "consumer" | "migrate" | "crashing-consumer";

/** Where a task is defined: the test suite's own in `tests/deno.json`, the rest in the repo's. */
function taskDir(task: ServiceTask): string {
  return task === "crashing-consumer" ? `${REPO_DIR}/tests` : REPO_DIR;
}

/**
 * A running `deno task <task>` child with its captured output. The task
 * runner and the service share a process group, so {@linkcode kill} reaches
 * both, and the runner forwards {@linkcode stop}'s SIGTERM to the service.
 * `TEST_VERBOSE=1` echoes each line.
 */
export class TaskProcess extends ServiceProcess implements AsyncDisposable {
  /** Every line the process printed so far, stdout and stderr interleaved. */
  readonly output: string[];
  readonly #pid: number;

  /** Starts `deno task -q <task>` where it is defined, with `env` added to this process's. */
  constructor(task: ServiceTask, env: Record<string, string>, name: string = task) {
    const output: string[] = [];
    const verbose = Boolean(Deno.env.get("TEST_VERBOSE"));
    super({
      name,
      command: Deno.execPath(),
      args: ["task", "-q", task],
      cwd: taskDir(task),
      env,
      output: (_, line) => {
        output.push(line);
        if (verbose) console.log(`${name} | ${line}`);
      },
      log: () => {},
    });
    this.output = output;
    this.#pid = this.start();
  }

  /** The task runner's pid (the service is its child), also after it exited. */
  override get pid(): number {
    return this.#pid;
  }

  /** Settles with the exit status once the process has exited and its output is read. */
  get status(): Promise<Deno.CommandStatus> {
    return this.exited;
  }

  /** Signals the runner and the service (SIGTERM unless told). */
  override kill(signal: Deno.Signal = "SIGTERM"): void {
    super.kill(signal);
  }

  /** Sends SIGTERM and waits for the exit status (SIGKILL after 30 s). */
  override async stop(): Promise<Deno.CommandStatus> {
    await super.stop();
    return await this.status;
  }

  /** SIGKILLs the process group and waits for it. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.kill("SIGKILL");
    await this.status;
  }
}
