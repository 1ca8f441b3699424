import assert from "node:assert/strict";
import { parseEnvFile } from "./env_file.ts";

Deno.test("parseEnvFile() reads KEY=VALUE lines and skips comments and blank lines", () => {
  const text = "# a comment\n\nPGHOST=database\nPGPORT=5432\n  # indented comment\n";
  assert.deepEqual(parseEnvFile(text), { PGHOST: "database", PGPORT: "5432" });
});

Deno.test("parseEnvFile() keeps URLs and '=' inside values", () => {
  assert.deepEqual(parseEnvFile("REDIS_URL=redis://redis:6379/0?a=b"), {
    REDIS_URL: "redis://redis:6379/0?a=b",
  });
});

Deno.test("parseEnvFile() strips quotes, an export prefix and trailing comments", () => {
  const text = [
    `export A="two words"`,
    `B='it''s'`,
    `C=plain # why`,
    `D=`,
    `E="line\\nbreak"`,
  ].join("\r\n");
  assert.deepEqual(parseEnvFile(text), {
    A: "two words",
    B: "it",
    C: "plain",
    D: "",
    E: "line\nbreak",
  });
});

Deno.test("parseEnvFile() takes the last of repeated keys", () => {
  assert.deepEqual(parseEnvFile("A=1\nA=2"), { A: "2" });
});

Deno.test("parseEnvFile() throws a SyntaxError naming the line that is not KEY=VALUE", () => {
  assert.throws(() => parseEnvFile("A=1\nnot an assignment"), {
    name: "SyntaxError",
    message: /line 2/,
  });
  assert.throws(() => parseEnvFile("1A=x"), { name: "SyntaxError", message: /line 1/ });
});
