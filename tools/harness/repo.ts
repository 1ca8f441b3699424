/**
 * Where the repo is and what it configures, for every piece of tooling: its
 * root, project.env parsed, and the tools dir `./stack` installs into.
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import { parseEnvFile } from "./env_file.ts";

/** The repo root, without a trailing slash. */
export const REPO_DIR: string = fileURLToPath(new URL("../..", import.meta.url)).replace(/\/$/, "");

/** project.env, parsed. */
export function projectEnv(): Record<string, string> {
  return parseEnvFile(Deno.readTextFileSync(`${REPO_DIR}/project.env`));
}

/** Puts the tools dir of `./stack` first on PATH (once), so its traefik and k6 are found. */
export function useStackTools(): void {
  const tools = `${
    Deno.env.get("STACK_TOOLS_DIR") ?? `${Deno.env.get("HOME")}/.cache/users-pipeline/tools`
  }/bin`;
  const path = Deno.env.get("PATH") ?? "";
  if (!path.split(":").includes(tools)) Deno.env.set("PATH", `${tools}:${path}`);
}
