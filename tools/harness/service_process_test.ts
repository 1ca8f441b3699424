import assert from "node:assert/strict";
import { RESTART_MAX_MS, restartDelayMs, ServiceProcess } from "./service_process.ts";
import { delay, waitFor } from "./wait.ts";

function collector() {
  const lines: string[] = [];
  return { lines, output: (name: string, line: string) => lines.push(`${name}: ${line}`) };
}

Deno.test("restartDelayMs() doubles from 100 ms and stops at the cap", () => {
  assert.deepEqual([0, 1, 2, 3].map(restartDelayMs), [100, 200, 400, 800]);
  assert.equal(restartDelayMs(30), RESTART_MAX_MS);
});

Deno.test("ServiceProcess prefixes each output line with its name", async () => {
  const { lines, output } = collector();
  const process = new ServiceProcess({
    name: "greeter",
    command: "sh",
    args: ["-c", "echo one; echo two >&2"],
    output,
    log: () => {},
  });
  process.start();
  const status = await process.exited;
  assert.equal(status.code, 0);
  assert.deepEqual(lines.toSorted(), ["greeter: one", "greeter: two"]);
  assert.equal(process.running, false);
});

Deno.test("ServiceProcess restarts a process that dies unless it was stopped", async () => {
  const { lines, output } = collector();
  const messages: string[] = [];
  const process = new ServiceProcess({
    name: "crasher",
    command: "sh",
    args: ["-c", "echo up; exit 3"],
    output,
    log: (message) => messages.push(message),
    restart: "unless-stopped",
  });
  process.start();
  // Wait for the third run's output itself: the restart counter moves before
  // the new process has printed anything, and a loaded machine widens that gap.
  const ups = () => lines.filter((line) => line === "crasher: up").length;
  await waitFor("three runs", () => ups() >= 3, { timeoutMs: 20_000, intervalMs: 20 })
    .finally(() => process.stop());
  assert.ok(messages.includes("crasher exited with code 3; restarting"), messages.join("\n"));
  assert.ok(process.restarts >= 2, `${process.restarts} restarts`);
  assert.ok(ups() >= 3, `${ups()} runs printed "up"`);
});

Deno.test("ServiceProcess.stop() sends SIGTERM and is not followed by a restart", async () => {
  const messages: string[] = [];
  const process = new ServiceProcess({
    name: "sleeper",
    command: "sleep",
    args: ["30"],
    output: () => {},
    log: (message) => messages.push(message),
    restart: "unless-stopped",
  });
  process.start();
  const status = await process.stop();
  assert.equal(status?.signal, "SIGTERM");
  await delay(300);
  assert.equal(process.running, false);
  assert.equal(process.restarts, 0);
  assert.deepEqual(messages, []);
});

Deno.test("ServiceProcess.stop() thaws a frozen process and kills it after the deadline", async () => {
  const messages: string[] = [];
  const process = new ServiceProcess({
    name: "stubborn",
    command: "sh",
    args: ["-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"],
    output: () => {},
    log: (message) => messages.push(message),
  });
  process.start();
  await delay(200);
  process.freeze();
  const status = await process.stop({ timeoutMs: 300 });
  assert.equal(status?.code, 137);
  assert.deepEqual(messages, ["stubborn did not stop within 0.3 s; killing it"]);
});

Deno.test("ServiceProcess.start() refuses to start a running process twice", async () => {
  const process = new ServiceProcess({ name: "once", command: "sleep", args: ["30"], log() {} });
  process.start();
  assert.throws(() => process.start(), { name: "TypeError", message: /current pid is/ });
  await process.stop();
});

Deno.test("ServiceProcess.stop() called twice returns the first call's promise", async () => {
  const process = new ServiceProcess({ name: "twice", command: "sleep", args: ["30"], log() {} });
  process.start();
  const first = process.stop();
  assert.equal(process.stop(), first);
  assert.equal((await first)?.signal, "SIGTERM");
});
