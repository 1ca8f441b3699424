import assert from "node:assert/strict";
import { parseWrkOutput, parseWrkTime } from "./wrk.ts";

const testdata = new URL("./testdata/", import.meta.url);

Deno.test("parseWrkTime() reads every unit wrk prints", () => {
  assert.equal(parseWrkTime("536.00us"), 0.536);
  assert.equal(parseWrkTime("1.56ms"), 1.56);
  assert.equal(parseWrkTime("1.02s"), 1_020);
  assert.equal(parseWrkTime("2.00m"), 120_000);
  assert.throws(() => parseWrkTime("3 parsecs"), /no known unit: current value is "3 parsecs"/);
});

Deno.test("parseWrkOutput() reads a captured report of 202s", async () => {
  const result = parseWrkOutput(await Deno.readTextFile(new URL("wrk_ok.txt", testdata)));
  assert.deepEqual(result, {
    requests: 134_805,
    seconds: 4,
    requestsPerSecond: 33_665.31,
    latencyMs: { p50: 1.56, p90: 3.24, p99: 7.42 },
    non2xx: 0,
    socketErrors: 0,
  });
});

Deno.test("parseWrkOutput() counts non-2xx responses and socket errors", async () => {
  const captured = await Deno.readTextFile(new URL("wrk_non2xx.txt", testdata));
  const result = parseWrkOutput(captured);
  assert.equal(result.non2xx, 56_966);
  assert.equal(result.latencyMs.p50, 0.536);
  assert.equal(result.seconds, 2.1);
  // wrk prints this line (format from its source) only when a socket error happened.
  const withErrors = captured.replace(
    "  Non-2xx",
    "  Socket errors: connect 1, read 3, write 0, timeout 12\n  Non-2xx",
  );
  assert.equal(parseWrkOutput(withErrors).socketErrors, 16);
});

Deno.test("parseWrkOutput() refuses output that is not a report", () => {
  assert.throws(
    () => parseWrkOutput("unable to connect to 127.0.0.1:1 Connection refused"),
    /lacks the totals/,
  );
});
