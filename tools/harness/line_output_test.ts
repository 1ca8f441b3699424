import assert from "node:assert/strict";
import { forEachLine, prefixLine } from "./line_output.ts";

function streamOf(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return ReadableStream.from(chunks.map((chunk) => encoder.encode(chunk)));
}

Deno.test("prefixLine() pads the name so the bars line up", () => {
  assert.deepEqual(prefixLine("redis", 8, "ready"), "redis    | ready");
  assert.deepEqual(prefixLine("server-10", 8, "x"), "server-10 | x");
});

Deno.test("forEachLine() joins lines split across chunks and keeps the last one", async () => {
  const lines: string[] = [];
  await forEachLine(streamOf("one\ntw", "o\r\n", "\nthree"), (line) => lines.push(line));
  assert.deepEqual(lines, ["one", "two", "", "three"]);
});

Deno.test("forEachLine() reads an empty stream as no lines", async () => {
  const lines: string[] = [];
  await forEachLine(streamOf(), (line) => lines.push(line));
  assert.deepEqual(lines, []);
});
