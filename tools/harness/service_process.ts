/**
 * The one child-process wrapper of the tooling: the native stack's servers and
 * replicas, the benchmark's services and the tests' `deno task` processes are
 * all a `ServiceProcess`. Each is spawned in its own process group (so a
 * Ctrl-C in the terminal reaches only the parent, which then stops the
 * children in order, and a signal to the group reaches `deno task` and the
 * Deno it runs alike), its output goes line by line to a sink under its name,
 * a stop has a deadline after which the group is killed, and — like compose's
 * `restart: unless-stopped`, when asked — it is started again when it dies
 * without having been asked to stop.
 *
 * @module
 */

import { consoleSink, forEachLine, type LineSink } from "./line_output.ts";

/** What to do when the process exits without {@linkcode ServiceProcess.stop}. */
export type RestartPolicy = "no" | "unless-stopped";

/** Options of {@linkcode ServiceProcess}. */
export interface ServiceProcessOptions {
  /** Shown before each line of output and in the restart messages. */
  name: string;
  /** The program, found on PATH. */
  command: string;
  /** @default [] */
  args?: string[];
  /** @default the supervisor's working directory */
  cwd?: string;
  /** Added to the supervisor's environment. @default {} */
  env?: Record<string, string>;
  /** Run as this user id (the supervisor must be root). @default the supervisor's */
  uid?: number;
  /** Run as this group id (the supervisor must be root). @default the supervisor's */
  gid?: number;
  /** Where the child's stdout and stderr lines go. @default consoleSink() */
  output?: LineSink;
  /** Where messages about the process go (exits, restarts). @default console.log */
  log?: (message: string) => void;
  /** @default "no" */
  restart?: RestartPolicy;
}

/**
 * The options a server built on a {@linkcode ServiceProcess} (Redis,
 * PostgreSQL) passes through to it; `name` defaults to the server's kind.
 */
export type SupervisedOptions = Partial<
  Pick<ServiceProcessOptions, "name" | "output" | "log" | "restart">
>;

/** Options of {@linkcode ServiceProcess.stop}. */
export interface StopOptions {
  /** The signal asking the process to stop. @default "SIGTERM" */
  signal?: Deno.Signal;
  /** How long to wait before SIGKILL. @default 30_000 (compose's stop_grace_period here) */
  timeoutMs?: number;
}

/**
 * Restarts back off like Docker's: 100 ms, doubling per crash in a row, reset
 * once a process has stayed up for {@linkcode RESTART_RESET_MS}; capped lower
 * than Docker's minute so a local stack recovers quickly.
 */
const RESTART_BASE_MS = 100;
/** The longest wait between two restarts. */
export const RESTART_MAX_MS = 10_000;
/** A process that ran this long counts as healthy again: the next crash restarts it at once. */
export const RESTART_RESET_MS = 10_000;

/** The wait before restarting a process that has crashed `attempt` times in a row (0-based). */
export function restartDelayMs(attempt: number): number {
  return Math.min(RESTART_BASE_MS * 2 ** attempt, RESTART_MAX_MS);
}

/** Sends `signal` to the process group `pid`; a group that is already gone is not an error. */
export function signalGroup(pid: number, signal: Deno.Signal): void {
  signalProcess(-pid, signal);
}

/** Sends `signal` to `pid`; a process that is already gone is not an error. */
export function signalProcess(pid: number, signal: Deno.Signal): void {
  try {
    Deno.kill(pid, signal);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
}

/** A supervised child process. */
export class ServiceProcess {
  /** The name it is shown and addressed by (`server-1`). */
  readonly name: string;
  /** How many times it was restarted after dying unexpectedly. */
  restarts = 0;

  readonly #options: ServiceProcessOptions;
  readonly #output: LineSink;
  readonly #log: (message: string) => void;
  #child: Deno.ChildProcess | undefined;
  #exited: Promise<Deno.CommandStatus> | undefined;
  #lastStatus: Deno.CommandStatus | undefined;
  #stopRequested = false;
  #restartTimer: ReturnType<typeof setTimeout> | undefined;
  #crashesInARow = 0;
  #startedAt = 0;
  #stopping: Promise<Deno.CommandStatus | undefined> | undefined;

  constructor(options: ServiceProcessOptions) {
    this.name = options.name;
    this.#options = options;
    this.#output = options.output ?? consoleSink();
    this.#log = options.log ?? console.log;
  }

  /** The pid while it runs. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Whether a process is running now (a frozen one counts). */
  get running(): boolean {
    return this.#child !== undefined;
  }

  /** The exit status of the last process that ended. */
  get lastStatus(): Deno.CommandStatus | undefined {
    return this.#lastStatus;
  }

  /**
   * Settles when the current process (or, between processes, the last one)
   * exits, after its remaining output has been printed.
   *
   * @throws {TypeError} before the first start.
   */
  get exited(): Promise<Deno.CommandStatus> {
    if (this.#exited === undefined) {
      throw new TypeError(`Cannot wait for ${this.name} as it was never started`);
    }
    return this.#exited;
  }

  /**
   * Spawns the process (cancelling a pending automatic restart) and returns its pid.
   *
   * @throws {TypeError} when it is running already.
   * @throws {Deno.errors.NotFound} when the command is not on PATH.
   */
  start(): number {
    if (this.#child !== undefined) {
      throw new TypeError(
        `Cannot start ${this.name} as it is running: current pid is ${this.#child.pid}`,
      );
    }
    clearTimeout(this.#restartTimer);
    this.#restartTimer = undefined;
    this.#stopRequested = false;
    this.#stopping = undefined;
    return this.#spawn();
  }

  /** Sends `signal` to the process alone (not its group). */
  signal(signal: Deno.Signal): void {
    if (this.#child) signalProcess(this.#child.pid, signal);
  }

  /**
   * Sends `signal` (SIGKILL unless told) to the whole process group, as a
   * crash would; with the `unless-stopped` policy the process is restarted.
   */
  kill(signal: Deno.Signal = "SIGKILL"): void {
    if (this.#child) signalGroup(this.#child.pid, signal);
  }

  /** Suspends the process group (SIGSTOP), like a hung process or a paused container. */
  freeze(): void {
    this.kill("SIGSTOP");
  }

  /** Resumes a frozen process group (SIGCONT). */
  thaw(): void {
    this.kill("SIGCONT");
  }

  /**
   * Asks the process to stop with `signal`, SIGKILLs its group after the
   * deadline, and settles with its exit status. It is not restarted. A frozen
   * process is thawed so that it sees the signal. A second call before the
   * next start returns the first call's promise.
   */
  stop(options: StopOptions = {}): Promise<Deno.CommandStatus | undefined> {
    this.#stopping ??= this.#stop(options);
    return this.#stopping;
  }

  async #stop(options: StopOptions): Promise<Deno.CommandStatus | undefined> {
    const { signal = "SIGTERM", timeoutMs = 30_000 } = options;
    this.#stopRequested = true;
    clearTimeout(this.#restartTimer);
    this.#restartTimer = undefined;
    const child = this.#child;
    if (child === undefined) return this.#lastStatus;
    const exited = this.exited;
    signalProcess(child.pid, signal);
    signalGroup(child.pid, "SIGCONT");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), timeoutMs);
    });
    try {
      const first = await Promise.race([exited, deadline]);
      if (first !== "timeout") return first;
    } finally {
      clearTimeout(timer);
    }
    this.#log(`${this.name} did not stop within ${timeoutMs / 1000} s; killing it`);
    signalGroup(child.pid, "SIGKILL");
    return await exited;
  }

  #spawn(): number {
    const options = this.#options;
    const child = new Deno.Command(options.command, {
      args: options.args ?? [],
      cwd: options.cwd,
      env: options.env,
      uid: options.uid,
      gid: options.gid,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      // Its own process group: the terminal's Ctrl-C must not reach it before the
      // supervisor has stopped what depends on it.
      detached: true,
    }).spawn();
    this.#child = child;
    this.#startedAt = Date.now();
    const print = (line: string) => this.#output(this.name, line);
    const output = Promise.all([
      forEachLine(child.stdout, print),
      forEachLine(child.stderr, print),
    ]);
    this.#exited = child.status.then(async (status) => {
      // The pipes close when the last process holding them exits, normally at once.
      await output.catch(() => {});
      this.#child = undefined;
      this.#lastStatus = status;
      this.#afterExit(status);
      return status;
    });
    return child.pid;
  }

  #afterExit(status: Deno.CommandStatus): void {
    if (this.#stopRequested) return;
    const restart = (this.#options.restart ?? "no") === "unless-stopped";
    this.#log(`${this.name} exited with code ${status.code}${restart ? "; restarting" : ""}`);
    if (!restart) return;
    if (Date.now() - this.#startedAt >= RESTART_RESET_MS) this.#crashesInARow = 0;
    const delay = restartDelayMs(this.#crashesInARow++);
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      try {
        this.#spawn();
        this.restarts++;
      } catch (error) {
        this.#log(`${this.name} could not be restarted: ${error}`);
        this.#afterExit({ success: false, code: 127, signal: null });
      }
    }, delay);
  }
}
