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

/** Runs a program to completion; never throws for a non-zero exit. */
export async function runCommand(
  program: string,
  args: readonly string[],
  { env, cwd = REPO_DIR, stdin }: { env?: Record<string, string>; cwd?: string; stdin?: string } =
    {},
): Promise<CommandResult> {
  const started = Date.now();
  const child = new Deno.Command(program, {
    args: [...args],
    cwd,
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
