/**
 * Runs a program to completion and keeps what it printed: the one helper the
 * compose, Swarm and multi-node tests share for the docker, compose and ip
 * commands they run.
 *
 * @module
 */

import { REPO_DIR } from "./repo.ts";

const decoder = new TextDecoder();

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** How long it ran, in ms. */
  readonly ms: number;
}

/** Options of {@linkcode runCommand}. */
export interface RunOptions {
  /** Variables added to (or, with `clearEnv`, making up) the program's environment. */
  readonly env?: Record<string, string>;
  /** @default the repo's root */
  readonly cwd?: string;
  /** Written to the program's standard input; none when absent. */
  readonly stdin?: string;
  /** `env` is the program's whole environment, nothing inherited. @default false */
  readonly clearEnv?: boolean;
}

/** Runs a program to completion; never throws for a non-zero exit. */
export async function runCommand(
  program: string,
  args: readonly string[],
  { env, cwd = REPO_DIR, stdin, clearEnv = false }: RunOptions = {},
): Promise<CommandResult> {
  const started = Date.now();
  const child = new Deno.Command(program, {
    args: [...args],
    cwd,
    clearEnv,
    env,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(stdin));
    await writer.close();
  }
  const output = await child.output();
  return {
    code: output.code,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
    ms: Date.now() - started,
  };
}
