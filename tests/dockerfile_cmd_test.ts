/**
 * The product images run exactly what the native stack runs: each Dockerfile's CMD is its
 * `deno.json` task's command, word for word. The images cannot use `deno task` itself, which
 * resolves every npm package of the workspace before starting and would download the tooling's
 * packages at each container start (the images cache only their entrypoint's).
 */

import assert from "node:assert/strict";
import { REPO_DIR } from "../tools/harness/repo.ts";

/** The JSON array of a Dockerfile's `CMD [...]` instruction (which may span lines). */
export function dockerfileCmd(dockerfile: string): string[] {
  const match = /^CMD\s+(\[[^\]]*\])/m.exec(dockerfile);
  if (match === null) throw new TypeError("Cannot find CMD as the Dockerfile has no exec-form CMD");
  return JSON.parse(match[1]!);
}

const tasks: Record<string, string> = JSON.parse(
  await Deno.readTextFile(`${REPO_DIR}/deno.json`),
).tasks;

for (
  const [dockerfile, task] of [["server/Dockerfile", "server"], [
    "server-consumer/Dockerfile",
    "consumer",
  ]] as const
) {
  Deno.test(`${dockerfile}'s CMD is the ${task} task's command`, async () => {
    const cmd = dockerfileCmd(await Deno.readTextFile(`${REPO_DIR}/${dockerfile}`));
    assert.deepEqual(cmd, tasks[task]!.split(/\s+/));
  });
}

Deno.test("dockerfileCmd() reads a CMD spread over lines, and refuses a file without one", () => {
  assert.deepEqual(dockerfileCmd('FROM x\nCMD ["deno", "run",\n  "a.ts"]\n'), [
    "deno",
    "run",
    "a.ts",
  ]);
  assert.throws(() => dockerfileCmd("FROM x\nCMD deno run a.ts\n"), TypeError);
});
