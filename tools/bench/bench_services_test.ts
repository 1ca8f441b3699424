import assert from "node:assert/strict";
import { parseUsedMemory } from "./bench_services.ts";

Deno.test("parseUsedMemory() reads used_memory, not its human-readable twin or peak", () => {
  const info = "# Memory\r\nused_memory:1034568\r\nused_memory_human:1010.32K\r\n" +
    "used_memory_peak:2000000\r\n";
  assert.equal(parseUsedMemory(info), 1_034_568);
});

Deno.test("parseUsedMemory() names what it got when INFO has no used_memory", () => {
  assert.throws(() => parseUsedMemory("# Memory\r\n"), /Cannot read Redis's memory/);
});
