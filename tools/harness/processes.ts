/**
 * Running our own services as real processes in tests — the same `deno task`
 * entrypoints compose and `./stack` run — and waiting on conditions.
 *
 * @module
 */

/** A running `deno task` child with its captured output. */
export class TaskProcess implements AsyncDisposable {
  readonly name: string;
  readonly output: string[] = [];
  readonly #child: Deno.ChildProcess;
  readonly status: Promise<Deno.CommandStatus>;

  constructor(
    task: "server" | "consumer" | "migrate",
    env: Record<string, string>,
    name: string = task,
  ) {
    this.name = name;
    this.#child = new Deno.Command(Deno.execPath(), {
      args: ["task", "-q", task],
      cwd: new URL("../..", import.meta.url).pathname,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const collect = async (stream: ReadableStream<Uint8Array>) => {
      const lines = stream.pipeThrough(new TextDecoderStream());
      let rest = "";
      for await (const chunk of lines) {
        const parts = (rest + chunk).split("\n");
        rest = parts.pop() ?? "";
        for (const line of parts) {
          this.output.push(line);
          if (Deno.env.get("TEST_VERBOSE")) console.log(`${this.name} | ${line}`);
        }
      }
      if (rest) this.output.push(rest);
    };
    const drained = Promise.all([collect(this.#child.stdout), collect(this.#child.stderr)]);
    this.status = this.#child.status.then(async (status) => {
      await drained;
      return status;
    });
  }

  get pid(): number {
    return this.#child.pid;
  }

  /**
   * Signals the process. `deno task` runs the script as its child, so the
   * signal goes to every process whose parent is the task runner as well.
   */
  kill(signal: Deno.Signal = "SIGTERM"): void {
    for (const pid of [...childrenOf(this.#child.pid), this.#child.pid]) {
      try {
        Deno.kill(pid, signal);
      } catch {
        // already gone
      }
    }
  }

  /** Sends SIGTERM and waits for the exit status. */
  async stop(): Promise<Deno.CommandStatus> {
    this.kill("SIGTERM");
    return await this.status;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.kill("SIGKILL");
    await this.status;
  }
}

function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) found.push(Number(entry.name), ...childrenOf(Number(entry.name)));
    } catch {
      // the process exited while we looked
    }
  }
  return found;
}
