/**
 * The programs the benchmark runs besides Deno: oha (the load of every phase
 * that sends requests), traefik, redis-server and PostgreSQL (every phase). Finds them (PATH, with `./stack`'s tools dir and Go's bin dir added)
 * and reads their versions for the report.
 *
 * @module
 */

import { findPostgresBinDir } from "@users-pipeline/harness/postgres_server";
import { useStackTools } from "@users-pipeline/harness/repo";

/** A program, the phases that need it, and how to install it. */
export interface Tool {
  readonly name: string;
  readonly args: readonly string[];
  /** Pulls the version out of the program's output. */
  readonly version: RegExp;
  readonly neededBy: readonly string[];
  readonly install: string;
}

/** Every program the benchmark needs. */
export const TOOLS: readonly Tool[] = [
  {
    name: "oha",
    args: ["--version"],
    version: /oha (\S+)/,
    neededBy: ["ingest", "traefik", "growth", "e2e", "bulk"],
    install: "./stack bench installs it (cargo install oha --locked)",
  },
  {
    name: "traefik",
    args: ["version"],
    version: /Version:\s+(\S+)/,
    neededBy: ["traefik", "e2e", "bulk"],
    install: "./stack bench installs it",
  },
  {
    name: "redis-server",
    args: ["--version"],
    version: /v=(\S+)/,
    neededBy: ["ingest", "traefik", "drain", "growth", "e2e", "bulk"],
    install: "apt-get install redis-server",
  },
];

/** The version `tool` reports, or undefined when it is not installed. */
export async function toolVersion(tool: Pick<Tool, "name" | "args" | "version">) {
  try {
    const result = await new Deno.Command(tool.name, {
      args: [...tool.args],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(result.stdout) + new TextDecoder().decode(result.stderr);
    return tool.version.exec(text)?.[1] ?? "unknown";
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

/**
 * The versions of Deno, PostgreSQL and every tool the given phases need.
 *
 * @throws {Error} naming each missing tool and how to install it.
 */
export async function checkTools(phases: readonly string[]): Promise<Record<string, string>> {
  useStackTools();
  const versions: Record<string, string> = { deno: Deno.version.deno };
  const missing: string[] = [];
  for (const tool of TOOLS) {
    if (!tool.neededBy.some((phase) => phases.includes(phase))) continue;
    const version = await toolVersion(tool);
    if (version === undefined) missing.push(`${tool.name} (${tool.install})`);
    else versions[tool.name] = version;
  }
  try {
    const binDir = Deno.env.get("STACK_PG_BIN_DIR") || await findPostgresBinDir();
    versions.postgres = await toolVersion({
      name: `${binDir}/postgres`,
      args: ["--version"],
      version: /\(PostgreSQL\) (\S+)/,
    }) ?? "unknown";
  } catch (error) {
    missing.push(`PostgreSQL (apt-get install postgresql-15): ${error}`);
  }
  if (missing.length > 0) {
    throw new Error(`Cannot run the benchmark without: ${missing.join("; ")}`);
  }
  return versions;
}
