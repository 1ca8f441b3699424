import assert from "node:assert/strict";
import { ohaArgs, parseChildTimes, parseOhaReport, POST_BODY } from "./oha.ts";

const report = async () =>
  await Deno.readTextFile(new URL("./testdata/oha_report.json", import.meta.url));

Deno.test("parseOhaReport() counts 202s, 503s and the rest, with latencies in ms", async () => {
  const result = parseOhaReport(await report());
  assert.equal(result.requests, result.accepted + result.rejected + result.failed);
  assert.ok(result.accepted > 0);
  assert.equal(result.dropped, 0);
  assert.ok(result.seconds > 0);
  assert.ok(result.latencyMs.p50 > 0 && result.latencyMs.p50 <= result.latencyMs.p99);
  assert.equal(result.slowestMs, 0.008714379 * 1_000);
});

Deno.test("parseOhaReport() counts what an open-model run did not send in its time", async () => {
  const text = await report();
  const { requests } = parseOhaReport(text);
  assert.equal(parseOhaReport(text, { rate: requests, seconds: 2 }).dropped, requests);
  assert.equal(parseOhaReport(text, { rate: requests / 2, seconds: 1 }).dropped, 0);
});

Deno.test("parseOhaReport() counts an error (no answer) and a 500 as failed", () => {
  const result = parseOhaReport(JSON.stringify({
    summary: { total: 2 },
    latencyPercentiles: { p50: 0.001, p90: 0.002, p99: 0.003 },
    statusCodeDistribution: { "202": 10, "503": 3, "500": 1 },
    errorDistribution: { "connection closed": 2 },
  }));
  assert.deepEqual(
    [result.requests, result.accepted, result.rejected, result.failed],
    [16, 10, 3, 3],
  );
  assert.deepEqual(result.latencyMs, { p50: 1, p90: 2, p99: 3 });
  // No slowest answer in the summary: NaN, which no bound holds.
  assert.ok(Number.isNaN(result.slowestMs));
});

Deno.test("parseOhaReport() refuses a report without the status counts", () => {
  assert.throws(
    () => parseOhaReport('{"summary": {"total": 1}, "latencyPercentiles": {}}'),
    /Cannot read oha's report/,
  );
});

Deno.test("ohaArgs() is closed loop without a rate and latency-corrected open model with one", () => {
  const closed = ohaArgs("http://127.0.0.1:1/users", { seconds: 10 });
  assert.ok(!closed.includes("-q") && !closed.includes("--latency-correction"));
  assert.deepEqual(closed.slice(closed.indexOf("-c"), closed.indexOf("-c") + 2), ["-c", "64"]);
  const open = ohaArgs("http://127.0.0.1:1/users", { seconds: 60, rate: 2_000, connections: 40 });
  assert.deepEqual(open.slice(open.indexOf("-q"), open.indexOf("-q") + 3), [
    "-q",
    "2000",
    "--latency-correction",
  ]);
  assert.ok(open.includes("--wait-ongoing-requests-after-deadline"));
  assert.equal(open[open.indexOf("-d") + 1], POST_BODY);
  assert.equal(open.at(-1), "http://127.0.0.1:1/users");
});

Deno.test("ohaArgs() records every answer in SQLite only when asked", () => {
  assert.ok(!ohaArgs("http://127.0.0.1:1/users", { seconds: 1 }).includes("--db-url"));
  const args = ohaArgs("http://127.0.0.1:1/users", { seconds: 1, dbPath: "/tmp/run.db" });
  assert.deepEqual(args.slice(args.indexOf("--db-url"), args.indexOf("--db-url") + 2), [
    "--db-url",
    "/tmp/run.db",
  ]);
});

Deno.test("parseChildTimes() adds the children's user and system time of bash's times", () => {
  assert.equal(parseChildTimes("0m0.002s 0m0.001s\n1m2.500s 0m0.250s\n"), 62.75);
  assert.throws(() => parseChildTimes("oops"), /Cannot read the load generator's CPU time/);
});

Deno.test("ohaArgs() sends a body file in place of the single user when given one", () => {
  const args = ohaArgs("http://127.0.0.1:1/users/batch", { seconds: 5, bodyPath: "/tmp/b.json" });
  assert.equal(args[args.indexOf("-D") + 1], "/tmp/b.json");
  assert.ok(!args.includes("-d"));
  assert.deepEqual(args.slice(args.indexOf("-T"), args.indexOf("-T") + 2), [
    "-T",
    "application/json",
  ]);
});
