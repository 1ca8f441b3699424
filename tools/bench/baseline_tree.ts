/**
 * An earlier build of this repo, for the ingest phase's `baseline` target
 * (`--baseline REF`): the commit's tree extracted from git into a temp dir
 * (`git archive REF | tar -x`), so that its own `deno task server` runs next
 * to ours in the same rounds, on the same Redis. Its packages come from the
 * shared Deno cache; only when they are not all there is `deno install
 * --frozen` run in the tree, so a normal run downloads nothing.
 *
 * @module
 */

import { REPO_DIR } from "@users-pipeline/harness/repo";
import { denoRunArgs, taskCommand } from "./deno_task.ts";
import type { Progress } from "./progress.ts";

/** Which build the baseline is, as results.json records it. */
export interface BaselineInfo {
  /** The ref as given on the command line (`6019304`, `HEAD~3`). */
  readonly ref: string;
  /** The commit it named, in full. */
  readonly commit: string;
  /** The commit's subject line, so the report says what the build was. */
  readonly subject: string;
}

/** A baseline extracted and ready to run. */
export interface BaselineTree extends BaselineInfo {
  /** The extracted tree's root: the API's cwd. */
  readonly dir: string;
  /** Its `deno.json` task `server`, run from `dir`. */
  readonly serverCommand: string;
}

interface Outcome {
  readonly success: boolean;
  readonly stdout: string;
  readonly stderr: string;
}

const decoder = new TextDecoder();

/**
 * Runs `program` to completion.
 *
 * @throws {Error} naming `why` when the program is not installed.
 */
async function run(program: string, args: string[], cwd: string, why: string): Promise<Outcome> {
  try {
    const out = await new Deno.Command(program, {
      args,
      cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    return {
      success: out.success,
      stdout: decoder.decode(out.stdout).trim(),
      stderr: decoder.decode(out.stderr).trim(),
    };
  } catch (error) {
    throw notInstalled(program, why, error);
  }
}

function notInstalled(program: string, why: string, error: unknown): Error {
  return error instanceof Deno.errors.NotFound
    ? new Error(`Cannot ${why} as ${program} is not on PATH`, { cause: error })
    : error instanceof Error
    ? error
    : new Error(String(error));
}

/**
 * The commit `ref` names in the repo at `repoDir`, with its subject.
 *
 * @throws {TypeError} when git does not know `ref` as a commit.
 * @throws {Error} when git is missing.
 */
export async function resolveCommit(
  ref: string,
  repoDir: string = REPO_DIR,
): Promise<BaselineInfo> {
  const why = `use --baseline ${ref}`;
  // `--end-of-options` so a ref that starts with "-" is a ref, not a flag.
  const parsed = await run(
    "git",
    ["rev-parse", "--verify", "--quiet", "--end-of-options", `${ref}^{commit}`],
    repoDir,
    why,
  );
  if (!parsed.success || parsed.stdout === "") {
    throw new TypeError(
      `Cannot use --baseline as git knows no such commit in ${repoDir}: current value is "${ref}"${
        parsed.stderr ? ` (${parsed.stderr})` : ""
      }`,
    );
  }
  const commit = parsed.stdout;
  const subject = await run("git", ["log", "-1", "--format=%s", commit], repoDir, why);
  return { ref, commit, subject: subject.stdout };
}

/**
 * Writes the tree of `commit` into `dir` (`git archive | tar -x`): tracked
 * files only, as a checkout of that commit would have them.
 *
 * @throws {Error} with git's or tar's message when either fails.
 */
export async function extractTree(
  commit: string,
  dir: string,
  repoDir: string = REPO_DIR,
): Promise<void> {
  const why = `extract ${commit}`;
  let git: Deno.ChildProcess;
  let tar: Deno.ChildProcess;
  try {
    git = new Deno.Command("git", {
      args: ["archive", "--format=tar", commit],
      cwd: repoDir,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    throw notInstalled("git", why, error);
  }
  try {
    tar = new Deno.Command("tar", {
      args: ["-x", "-C", dir],
      stdin: "piped",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    git.kill();
    await git.output().catch(() => {});
    throw notInstalled("tar", why, error);
  }
  const text = (stream: ReadableStream<Uint8Array>) => new Response(stream).text();
  // A tar that dies early breaks the pipe; its own status says why.
  const piping = git.stdout.pipeTo(tar.stdin).catch(() => {});
  const [gitStatus, gitErr, tarStatus, tarErr] = await Promise.all([
    git.status,
    text(git.stderr),
    tar.status,
    text(tar.stderr),
    piping,
  ]);
  if (!gitStatus.success || !tarStatus.success) {
    throw new Error(
      `Cannot extract ${commit} into ${dir}: ${
        !gitStatus.success ? `git archive: ${gitErr.trim()}` : `tar: ${tarErr.trim()}`
      }`,
    );
  }
}

/**
 * The module a task command runs: its last argument (`server/main.ts`).
 *
 * @throws {TypeError} when the command is not a plain `deno run`.
 */
export function taskModule(command: string): string {
  return denoRunArgs(command).at(-1)!;
}

/**
 * Makes sure every package `module` in `dir` needs is in the Deno cache:
 * checks with `--cached-only` (quick, downloads nothing) and only if that
 * fails runs `deno install --frozen` for it, which downloads what its
 * deno.lock pins. Returns whether it had to install.
 *
 * @throws {Error} with deno's message when the install fails.
 */
export async function ensureCached(
  dir: string,
  module: string,
  progress: Progress,
): Promise<boolean> {
  const args = ["install", "--frozen", "--entrypoint", module];
  const cached = await run(Deno.execPath(), [...args, "--cached-only"], dir, "check the cache");
  if (cached.success) return false;
  progress.step(
    `the baseline's packages are not all cached: deno install --frozen --entrypoint ${module} in ${dir} (downloads)`,
  );
  const installed = await run(Deno.execPath(), args, dir, "install the baseline's packages");
  if (!installed.success) {
    throw new Error(`Cannot install the baseline's packages in ${dir}: ${installed.stderr}`);
  }
  return true;
}

/**
 * Resolves `ref`, extracts its tree into a new dir under `workDir` and makes
 * sure its API can start with `--cached-only`.
 */
export async function prepareBaseline(
  ref: string,
  workDir: string,
  progress: Progress,
): Promise<BaselineTree> {
  const info = await resolveCommit(ref);
  const dir = await Deno.makeTempDir({ dir: workDir, prefix: "baseline-" });
  await extractTree(info.commit, dir);
  const serverCommand = taskCommand("server", dir);
  await ensureCached(dir, taskModule(serverCommand), progress);
  progress.step(
    `baseline ${ref} = ${info.commit.slice(0, 7)} "${info.subject}", extracted to ${dir}`,
  );
  return { ...info, dir, serverCommand };
}
