import assert from "node:assert/strict";
import { type CpuProfile, originOf, summariseCpuProfile } from "./cpu_profile.ts";

const REPO = "file:///work/main/";
const NPM = "file:///root/.cache/deno/npm/registry.npmjs.org";

Deno.test("originOf() names npm packages, Deno extensions, our modules and V8's pseudo-frames", () => {
  assert.equal(originOf(`${NPM}/ioredis/5.9.3/built/Redis.js`, "sendCommand", REPO), "npm:ioredis");
  assert.equal(originOf(`${NPM}/@scope/pkg/1.0.0/index.js`, "f", REPO), "npm:@scope/pkg");
  assert.equal(originOf("ext:deno_http/00_serve.ts", "serve", REPO), "deno:deno_http");
  assert.equal(originOf("node:crypto", "randomFillSync", REPO), "node:crypto");
  assert.equal(originOf(`${REPO}server/app.ts`, "parseUser", REPO), "server/app.ts");
  assert.equal(originOf("", "(garbage collector)", REPO), "(garbage collector)");
  assert.equal(originOf("", "writev", REPO), "(native)");
});

Deno.test("summariseCpuProfile() ranks self time and leaves idle out of the shares", () => {
  const frame = (functionName: string, url: string, lineNumber = 0) => ({
    functionName,
    url,
    lineNumber,
  });
  const profile: CpuProfile = {
    nodes: [
      { id: 1, callFrame: frame("(root)", "", -1) },
      { id: 2, callFrame: frame("(idle)", "", -1) },
      { id: 3, callFrame: frame("parseUser", `${REPO}server/app.ts`, 140) },
      { id: 4, callFrame: frame("", `${NPM}/hono/4.13.19/dist/compose.js`, 9) },
      { id: 5, callFrame: frame("(garbage collector)", "", -1) },
    ],
    samples: [2, 3, 3, 4, 5, 2, 3],
    timeDeltas: [4_000, 1_000, 1_000, 1_000, 1_000, 4_000, 2_000],
  };
  const summary = summariseCpuProfile(profile, { repoUrl: REPO, top: 2 });
  assert.equal(summary.totalMs, 14);
  assert.equal(summary.idleShare, 8 / 14);
  assert.deepEqual(summary.frames, [
    { label: "parseUser (server/app.ts:141)", selfMs: 4, share: 4 / 6 },
    { label: "(anonymous) (hono/dist/compose.js:10)", selfMs: 1, share: 1 / 6 },
  ]);
  assert.deepEqual(summary.origins.map((o) => o.label), ["server/app.ts", "npm:hono"]);
});
