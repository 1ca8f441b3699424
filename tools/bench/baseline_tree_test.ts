import assert from "node:assert/strict";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { ensureCached, extractTree, resolveCommit, taskModule } from "./baseline_tree.ts";
import { taskCommand } from "./deno_task.ts";
import { Progress } from "./progress.ts";

Deno.test("resolveCommit() names the commit a ref points at, with its subject", async () => {
  const head = await resolveCommit("HEAD");
  assert.equal(head.ref, "HEAD");
  assert.match(head.commit, /^[0-9a-f]{40}$/);
  assert.notEqual(head.subject, "");
  // An abbreviated hash resolves to the same commit.
  assert.equal((await resolveCommit(head.commit.slice(0, 12))).commit, head.commit);
});

Deno.test("resolveCommit() refuses a ref git does not know, by name", async () => {
  await assert.rejects(
    () => resolveCommit("no-such-branch-or-tag"),
    (error: Error) =>
      error instanceof TypeError &&
      /^Cannot use --baseline as git knows no such commit in .*: current value is "no-such-branch-or-tag"/
        .test(error.message),
  );
  // A ref that looks like a flag is still a ref.
  await assert.rejects(() => resolveCommit("--all"), TypeError);
});

Deno.test("resolveCommit() refuses outside a git repository", async () => {
  await assert.rejects(() => resolveCommit("HEAD", "/"), /knows no such commit in \/:/);
});

Deno.test("extractTree() reports git's error for a commit it cannot archive", async () => {
  await assert.rejects(
    () => extractTree("0".repeat(40), `${REPO_DIR}/no-such-dir`),
    /^Error: Cannot extract 0+ into .*no-such-dir: (git archive|tar): /,
  );
});

Deno.test("taskModule() is the module a task command runs", () => {
  assert.equal(taskModule(taskCommand("server")), "server/main.ts");
  assert.throws(() => taskModule("deno task server"), TypeError);
});

Deno.test("ensureCached() installs nothing when the cache holds every package", async () => {
  const lines: string[] = [];
  const installed = await ensureCached(
    REPO_DIR,
    "server/main.ts",
    new Progress((l) => lines.push(l)),
  );
  assert.equal(installed, false);
  assert.deepEqual(lines, []);
});
