import assert from "node:assert/strict";
import { type Member, ProcessRoster, processTree, within } from "./process_roster.ts";

/** A member whose end the test decides: `end(code)` settles its status. */
function fakeMember(
  name: string,
  onSignal: (signal: Deno.Signal) => void = () => {},
  output: string[] = [],
) {
  let end = (_code: number) => {};
  const status = new Promise<Deno.CommandStatus>((resolve) => {
    end = (code) => resolve({ success: code === 0, code, signal: null });
  });
  const member: Member = {
    name,
    output: [`${name} line`, ...output],
    status,
    signal: onSignal,
    kill() {},
  };
  return { member, end: (code: number) => end(code) };
}

Deno.test("ProcessRoster names its members apart and sees who ended by themselves", async () => {
  await using roster = new ProcessRoster();
  const a = fakeMember(roster.nextName("consumer"));
  roster.add(a, a.member);
  const b = fakeMember(roster.nextName("consumer"));
  roster.add(b, b.member);
  assert.deepEqual([a.member.name, b.member.name], ["consumer-1", "consumer-2"]);
  a.end(1);
  b.end(137);
  roster.get(b).endsOnPurpose = true;
  await Promise.all([a.member.status, b.member.status]);
  assert.deepEqual(roster.endedByThemselves().map((p) => p.name), ["consumer-1"]);
  assert.deepEqual(roster.tails(1), [
    "--- consumer-1\nconsumer-1 line",
    "--- consumer-2\nconsumer-2 line",
  ]);
  assert.throws(() => roster.get({}), TypeError);
});

Deno.test("ProcessRoster.stopRunning() reports a bad exit and one still running", async () => {
  await using roster = new ProcessRoster();
  const clean = fakeMember("clean", () => clean.end(0));
  const error = '{"level":"error","event":"leaked_handle"}';
  const failing = fakeMember("failing", () => failing.end(3), [
    error,
    '{"level":"info","event":"stopped"}',
  ]);
  const stuck = fakeMember("stuck");
  for (const fake of [clean, failing, stuck]) roster.add(fake, fake.member);
  assert.deepEqual(await roster.stopRunning(50), [
    `failing exited 3 (null)\n  ${error}`,
    "stuck still runs 0.05 s after SIGTERM",
  ]);
  stuck.end(0);
});

Deno.test("ProcessRoster.sigterm() times each exit from the signal", async () => {
  await using roster = new ProcessRoster();
  const quick = fakeMember("quick", () => quick.end(0));
  const stuck = fakeMember("stuck");
  roster.add(quick, quick.member);
  roster.add(stuck, stuck.member);
  const exits = await roster.sigterm([quick, stuck], 50);
  assert.deepEqual(exits.map(({ name, code }) => ({ name, code })), [
    { name: "quick", code: 0 },
    { name: "stuck", code: undefined },
  ]);
  assert.ok(exits[1]!.ms >= 50);
  stuck.end(0);
});

Deno.test("within() gives the value in time, else undefined", async () => {
  assert.equal(await within(Promise.resolve(1), 1_000), 1);
  assert.equal(await within(new Promise(() => {}), 10), undefined);
});

Deno.test("processTree() lists a child before its parent", async () => {
  const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
  try {
    const tree = processTree(Deno.pid);
    assert.ok(tree.indexOf(child.pid) >= 0 && tree.indexOf(child.pid) < tree.indexOf(Deno.pid));
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
});
