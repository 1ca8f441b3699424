import assert from "node:assert/strict";
import { REPO_DIR } from "./repo.ts";
import { withLoadTurn } from "./load_turn.ts";

const MODULE = new URL("./load_turn.ts", import.meta.url).href;

/** Another process that takes the turn at `path`, says so on stdout, and holds it `ms`. */
function holder(path: string, ms: number) {
  const code = `import { withLoadTurn } from ${JSON.stringify(MODULE)};
    await withLoadTurn("holder", async () => {
      console.log("held");
      await new Promise((resolve) => setTimeout(resolve, ${ms}));
    }, ${JSON.stringify(path)});`;
  return new Deno.Command(Deno.execPath(), {
    args: ["eval", code],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
}

async function firstLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  reader.releaseLock();
  return text.trim();
}

Deno.test("withLoadTurn() waits while another process holds the turn", async () => {
  const path = await Deno.makeTempFile();
  try {
    const child = holder(path, 1_500);
    assert.equal(await firstLine(child.stdout), "held");
    const started = Date.now();
    const ran = await withLoadTurn("test", () => Promise.resolve(Date.now() - started), path);
    const status = await child.status;
    assert.ok(status.success);
    // The child slept 1.5 s from printing "held"; we asked after reading that line.
    assert.ok(ran >= 1_000, `ran after ${ran} ms, while the other process held the turn`);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("withLoadTurn() nests and overlaps within one process, then lets another process in", async () => {
  const path = await Deno.makeTempFile();
  try {
    const order: string[] = [];
    await withLoadTurn("outer", async () => {
      order.push("outer");
      await Promise.all([
        withLoadTurn("inner a", () => Promise.resolve(order.push("a")), path),
        withLoadTurn("inner b", () => Promise.resolve(order.push("b")), path),
      ]);
    }, path);
    assert.deepEqual(order, ["outer", "a", "b"]);
    // Released: another process takes it at once.
    const child = holder(path, 0);
    assert.equal(await firstLine(child.stdout), "held");
    assert.ok((await child.status).success);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("withLoadTurn() releases the turn when its function throws", async () => {
  const path = await Deno.makeTempFile();
  try {
    await assert.rejects(
      withLoadTurn("fails", () => Promise.reject(new Error("boom")), path),
      /boom/,
    );
    const child = holder(path, 0);
    assert.equal(await firstLine(child.stdout), "held");
    assert.ok((await child.status).success);
  } finally {
    await Deno.remove(path);
  }
});

/** The file names in `./stack`'s bash array `name=(…)`. */
function stackList(stack: string, name: string): string[] {
  const body = new RegExp(`^${name}=\\(([^)]*)\\)`, "m").exec(stack)?.[1];
  assert.ok(body !== undefined, `./stack defines no ${name}=(…)`);
  return body.split(/\s+/).filter((word) => word !== "");
}

Deno.test("./stack lists exactly the test files that take the load turn, so its order holds", async () => {
  // The [native] group runs its turn tests last (./stack, TURN_TESTS): one that is not listed
  // would hold up the unit tests behind it while it waits for the Docker group's turn.
  const stack = await Deno.readTextFile(`${REPO_DIR}/stack`);
  const listed = [...stackList(stack, "DOCKER_TESTS"), ...stackList(stack, "TURN_TESTS")].sort();
  const taking: string[] = [];
  for await (const tier of Deno.readDir(`${REPO_DIR}/tests`)) {
    if (!tier.isDirectory) continue;
    for await (const entry of Deno.readDir(`${REPO_DIR}/tests/${tier.name}`)) {
      if (!entry.name.endsWith("_test.ts")) continue;
      const path = `tests/${tier.name}/${entry.name}`;
      const source = await Deno.readTextFile(`${REPO_DIR}/${path}`);
      // scenario.ts's scenario() and clusterScenario() take it per test.
      if (/^\s*(?:scenario|clusterScenario)\(|holdLoadTurnForFile\(|withLoadTurn\(/m.test(source)) {
        taking.push(path);
      }
    }
  }
  assert.deepEqual(listed, taking.sort());
});
