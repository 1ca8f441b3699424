/**
 * The processes a stage started and what became of each: whether it ended, and whether its end
 * was the scenario's doing (a kill, a stop, a crash it injected) or a failure. A service that
 * ends by itself fails the scenario; every other one must exit 0 on SIGTERM at the end.
 *
 * @module
 */

import type { TaskProcess } from "@users-pipeline/harness/processes";
import { waitFor } from "@users-pipeline/harness/wait";
import { hasEvent } from "./service_events.ts";

/** A process a roster holds, however it was started. */
export interface Member {
  readonly name: string;
  readonly output: readonly string[];
  readonly status: Promise<Deno.CommandStatus>;
  /** Sends a signal to the service itself, not to a task runner in between. */
  readonly signal: (signal: Deno.Signal) => void;
  /** SIGKILLs the process and what it started. */
  readonly kill: () => void;
}

/** A member and what became of it. */
export interface Tracked extends Member {
  exit?: Deno.CommandStatus;
  /** Whether its end is the scenario's doing, and the scenario's to check. */
  endsOnPurpose: boolean;
}

/** How one process ended after a SIGTERM, and how long after; `code` undefined: still running. */
export interface Exit {
  readonly name: string;
  readonly code: number | undefined;
  readonly ms: number;
}

/** The processes of one stage, by the handle the scenario holds. */
export class ProcessRoster implements AsyncDisposable {
  readonly #processes = new Map<object, Tracked>();

  /** Adds `member`, known by `key` (the handle the scenario holds). */
  add(key: object, member: Member): Tracked {
    const tracked: Tracked = { ...member, endsOnPurpose: false };
    member.status.then((status) => {
      tracked.exit = status;
    }, () => {});
    this.#processes.set(key, tracked);
    return tracked;
  }

  /** Adds a `deno task` process: its signals go to the service, its kill to the whole group. */
  addTask(process: TaskProcess): Tracked {
    return this.add(process, {
      name: process.name,
      output: process.output,
      status: process.status,
      signal: (signal) => signalService(process, signal),
      // The runner and the service: a kill must not leave the service behind.
      kill: () => process.kill("SIGKILL"),
    });
  }

  /** @throws {TypeError} for a process this roster does not hold. */
  get(process: object): Tracked {
    const tracked = this.#processes.get(process);
    if (tracked === undefined) {
      throw new TypeError("Cannot find a process this stage did not start");
    }
    return tracked;
  }

  /** `consumer-1`, `consumer-2`…: names that tell the stage's processes apart in failure output. */
  nextName(kind: string): string {
    const same = [...this.#processes.values()].filter((p) => p.name.startsWith(`${kind}-`));
    return `${kind}-${same.length + 1}`;
  }

  /** The processes that ended without the scenario having ended them. */
  endedByThemselves(): Tracked[] {
    return [...this.#processes.values()].filter((p) => p.exit && !p.endsOnPurpose);
  }

  /** Throws, with `tails()`, when a process ended without the scenario having ended it. */
  assertNoneEnded(tails: () => string): void {
    const ended = this.endedByThemselves();
    if (ended.length === 0) return;
    const which = ended.map((p) => `${p.name} (exit ${p.exit!.code}, ${p.exit!.signal})`);
    throw new Error(`exited by itself during the scenario: ${which.join(", ")}\n${tails()}`);
  }

  /**
   * Sends SIGTERM to every process still running and returns what went wrong: one that still
   * runs `limitMs` later, or that exited other than 0.
   */
  async stopRunning(limitMs: number): Promise<string[]> {
    const running = [...this.#processes.values()].filter((p) => p.exit === undefined);
    for (const process of running) process.signal("SIGTERM");
    const failures = await Promise.all(running.map(async (process) => {
      const status = await within(process.status, limitMs);
      if (status === undefined) {
        return `${process.name} still runs ${limitMs / 1000} s after SIGTERM`;
      }
      if (status.code === 0) return undefined;
      // Its own error records (and Deno's own `error: Uncaught …` on stderr) first: the head of
      // a failure is what a summary shows.
      const errors = process.output.filter((line) => /"level":"error"|^error: /.test(line))
        .slice(-3);
      return `${process.name} exited ${status.code} (${status.signal})` +
        errors.map((line) => `\n  ${line}`).join("");
    }));
    return failures.filter((failure) => failure !== undefined);
  }

  /**
   * Sends SIGTERM to each of `processes` at once, as a container stop does, and returns how each
   * ended and how long after the signal; `code` is `undefined` for one still running after
   * `limitMs`.
   */
  async sigterm(processes: readonly object[], limitMs: number): Promise<Exit[]> {
    const sentAt = Date.now();
    const members = processes.map((process) => this.get(process));
    for (const member of members) member.signal("SIGTERM");
    return await Promise.all(members.map(async (member) => {
      const status = await within(member.status, limitMs);
      return { name: member.name, code: status?.code, ms: Date.now() - sentAt };
    }));
  }

  /**
   * Waits until `process` printed `event` (its readiness). Fails when it exits first, or after
   * `timeoutMs`, with `tails()` in the message.
   */
  async waitForEvent(
    process: Tracked,
    event: string,
    { timeoutMs, tails }: { timeoutMs: number; tails: () => string },
  ): Promise<void> {
    await waitFor(() => `${process.name} to be ready (${event})\n${tails()}`, () => {
      if (hasEvent(process.output, event)) return true;
      if (process.exit !== undefined) {
        throw new Error(
          `${process.name} exited ${process.exit.code} before it was ready\n${tails()}`,
        );
      }
      return false;
    }, { timeoutMs });
  }

  /** The last `lines` lines of every process. */
  tails(lines: number): string[] {
    return [...this.#processes.values()]
      .map((p) => `--- ${p.name}\n${p.output.slice(-lines).join("\n")}`);
  }

  /** SIGKILLs every process still running and waits for all of them. */
  async [Symbol.asyncDispose](): Promise<void> {
    const processes = [...this.#processes.values()];
    for (const process of processes) if (process.exit === undefined) process.kill();
    await Promise.allSettled(processes.map((process) => process.status));
  }
}

/** `status` if it settles within `limitMs`, else `undefined`. */
export async function within<T>(status: Promise<T>, limitMs: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), limitMs);
  });
  try {
    return await Promise.race([status, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Sends `signal` to each of `pids` that still runs. */
export function killAll(pids: readonly number[], signal: Deno.Signal): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/**
 * Signals the service a `deno task` runner started, not the runner: the way a
 * container's stop signals the service alone. (The runner would forward a
 * second SIGTERM, which can land while the service is already exiting.)
 */
export function signalService(process: TaskProcess, signal: Deno.Signal): void {
  killAll(processTree(process.pid).filter((pid) => pid !== process.pid), signal);
}

/** A process and its descendants, descendants first. */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      // The command name in parentheses may contain spaces: ppid follows the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry.name)]);
    } catch {
      // exited while we looked
    }
  }
  const tree = (pid: number): number[] => [...(children.get(pid) ?? []).flatMap(tree), pid];
  return tree(root);
}
