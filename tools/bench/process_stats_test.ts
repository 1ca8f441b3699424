import assert from "node:assert/strict";
import { delay } from "@users-pipeline/harness/wait";
import {
  parseCpuSeconds,
  parseMachineCpu,
  parseVmRssKiB,
  peakMiB,
  readCpuSeconds,
  readMachineCpu,
  readProc,
  readRssMiB,
  readTreeCpuSeconds,
  sampleRss,
} from "./process_stats.ts";

Deno.test("parseVmRssKiB() reads VmRSS from a captured /proc/<pid>/status", async () => {
  const status = await Deno.readTextFile(new URL("./testdata/proc_status.txt", import.meta.url));
  assert.equal(parseVmRssKiB(status), 1704);
  assert.throws(() => parseVmRssKiB("Name:\tzombie\n"), /no such line/);
});

Deno.test("parseCpuSeconds() adds user and system ticks, whatever the command name", () => {
  const stat = "4242 (deno (worker) x) S 1 4242 4242 0 -1 4194304 122 0 0 0 250 50 0 0 20 0 9 0";
  assert.equal(parseCpuSeconds(stat), 3);
  assert.throws(() => parseCpuSeconds("4242 (deno) S 1"), /too few fields/);
});

Deno.test("parseMachineCpu() counts idle and iowait as not busy", () => {
  const stat = "cpu  100 5 50 800 40 0 5 0 0 0\ncpu0 50 2 25 400 20 0 3 0 0 0\n";
  assert.deepEqual(parseMachineCpu(stat), { busySeconds: 1.6, totalSeconds: 10 });
  assert.throws(() => parseMachineCpu("intr 1 2 3"), /no cpu line/);
});

Deno.test("readProc() reads matching lines by file and skips files that do not exist", async () => {
  const found = await readProc(`/proc/${Deno.pid}/status /proc/0/nope`, "^Name:");
  assert.deepEqual([...found.keys()], [`/proc/${Deno.pid}/status`]);
  assert.match(found.get(`/proc/${Deno.pid}/status`)![0]!, /^Name:\s+deno/);
});

Deno.test("the readers see this process, its children and the machine", async () => {
  assert.ok(((await readRssMiB(Deno.pid)) ?? 0) > 1);
  assert.equal(await readRssMiB(2 ** 22 + 1), undefined);
  assert.equal(await readCpuSeconds(2 ** 22 + 1), undefined);
  const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
  try {
    const [tree, none] = await readTreeCpuSeconds([Deno.pid, 2 ** 22 + 1]);
    assert.ok(tree! >= (await readCpuSeconds(Deno.pid))! - 0.05);
    assert.equal(none, 0);
  } finally {
    child.kill();
    await child.status;
  }
  assert.ok((await readMachineCpu()).totalSeconds > 0);
});

Deno.test("sampleRss() samples at start, on its timer and at stop", async () => {
  const sampler = sampleRss(Deno.pid, 20);
  await delay(70);
  const samples = await sampler.stop();
  assert.ok(samples.length >= 3, `${samples.length} samples`);
  assert.equal(peakMiB(samples), Math.max(...samples.map((s) => s.mib)));
  assert.equal(peakMiB([]), 0);
});

Deno.test("sampleRss() records the progress counter with each sample", async () => {
  let done = 0;
  const sampler = sampleRss(Deno.pid, 10, () => done++);
  await delay(40);
  const samples = await sampler.stop();
  assert.deepEqual(samples.map((s) => s.done), samples.map((_, i) => i));
});
