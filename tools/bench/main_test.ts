import assert from "node:assert/strict";
import { CAPACITY_PHASES, parseBenchArgs, PHASES } from "./main.ts";

Deno.test("parseBenchArgs() defaults to every phase of the full run", () => {
  const args = parseBenchArgs([]);
  assert.equal(args.quick, false);
  assert.deepEqual(args.phases, [...PHASES]);
  assert.match(args.out, /bench\/results$/);
});

Deno.test("parseBenchArgs() reads --quick, --out and --only (in run order)", () => {
  const args = parseBenchArgs(["--quick", "--out", "/tmp/x", "--only", "e2e,ingest"]);
  assert.deepEqual(args, {
    quick: true,
    capacity: false,
    out: "/tmp/x",
    phases: ["ingest", "e2e"],
  });
  assert.match(parseBenchArgs(["--quick"]).out, /bench\/results\/quick$/);
  assert.equal(parseBenchArgs(["--render", "r.json"]).render, "r.json");
});

Deno.test("parseBenchArgs() refuses unknown arguments and phases", () => {
  assert.throws(() => parseBenchArgs(["--fast"]), /\[--quick \| --capacity\] \[--out DIR\]/);
  assert.throws(() => parseBenchArgs(["--only", "ingest,soak"]), /--only takes/);
});

Deno.test("parseBenchArgs() reads --capacity: the traefik, drain and bulk phases, its own output dir", () => {
  const args = parseBenchArgs(["--capacity"]);
  assert.equal(args.capacity, true);
  assert.deepEqual(args.phases, [...CAPACITY_PHASES]);
  assert.match(args.out, /bench\/results\/capacity$/);
  assert.deepEqual(parseBenchArgs(["--capacity", "--only", "drain"]).phases, ["drain"]);
  assert.throws(() => parseBenchArgs(["--capacity", "--quick"]), /two different runs/);
});
