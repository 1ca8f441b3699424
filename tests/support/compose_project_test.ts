import assert from "node:assert/strict";
import { acceptedK6Args, parseAcceptedLines, targetsOutside } from "./compose_project.ts";

/** One line as `k6 run --log-format=json` prints a script's console.log. */
function k6Line(fields: Record<string, unknown>): string {
  return JSON.stringify({ level: "info", msg: JSON.stringify(fields), source: "console" });
}

Deno.test("parseAcceptedLines() sorts k6's lines into accepted, refused, indeterminate and forbidden", () => {
  const base = { retry_after: null, error: null, id: null, sent_at: 1_000, ms: 5 };
  const output = [
    "k6 banner and other noise",
    JSON.stringify({ level: "info", msg: "not a request", source: "k6" }),
    k6Line({ ...base, name: "a", status: 202, id: "0193" }),
    k6Line({
      ...base,
      name: "b",
      status: 503,
      retry_after: "1",
      code: "queue_full",
      body: '{"error":"full","code":"queue_full"}\n',
    }),
    k6Line({ ...base, name: "c", status: 0, error: "connection refused" }),
    k6Line({ ...base, name: "d", status: 502 }),
    k6Line({ ...base, name: "e", status: 503 }),
    k6Line({ ...base, name: "f", status: 500 }),
    k6Line({ ...base, name: "g", status: 202 }),
    k6Line({
      ...base,
      name: "h",
      status: 503,
      retry_after: "1",
      code: "no_replica_ready",
      body: "no available server\n",
    }),
    k6Line({ ...base, name: "i", status: 0, error: "request timeout", error_code: 1050 }),
    // keyed-k6.js's line for a user it settled: not a request.
    k6Line({ key: "k6-1-1-0", name: "keyed 1 1-0", id: "0194", tries: 2 }),
  ].join("\n");
  const outcomes = parseAcceptedLines(output);
  const kinds = outcomes.map((o) => `${o.name}:${o.kind}`);
  assert.deepEqual(kinds, [
    "a:accepted",
    "b:rejected",
    "c:indeterminate",
    "d:indeterminate",
    "e:unexpected",
    "f:unexpected",
    "g:unexpected",
    "h:rejected",
    "i:indeterminate",
  ]);
  assert.deepEqual(
    outcomes.map((o) => o.timedOut ?? false),
    [false, false, false, false, false, false, false, false, true],
    "only k6's own timeout is a hang",
  );
  assert.equal(outcomes[1]!.detail, "full", "a refusal carries the API's error");
  assert.equal(outcomes[1]!.code, "queue_full", "and its code");
  assert.deepEqual(
    [outcomes[7]!.code, outcomes[7]!.detail],
    ["no_replica_ready", "no available server"],
    "Traefik's own 503: the code of its header, its text",
  );
  assert.deepEqual([outcomes[0]!.sentAt, outcomes[0]!.ms], [1_000, 5], "each keeps its timing");
});

Deno.test("acceptedK6Args() passes the load's settings as k6 -e variables", () => {
  assert.deepEqual(acceptedK6Args("s.js", { prefix: "p", rate: 2, seconds: 3 }), [
    "run",
    "--quiet",
    "--log-format=json",
    "-e",
    "PREFIX=p",
    "-e",
    "RATE=2",
    "-e",
    "DURATION=3s",
    "s.js",
  ]);
  assert.ok(
    acceptedK6Args("s.js", { prefix: "p", rate: 2, seconds: 3, baseUrl: "http://x" })
      .includes("BASE_URL=http://x"),
  );
});

Deno.test("targetsOutside() names the targets of Traefik's log that are not its own, and needs one", () => {
  const line = (address: string) =>
    `2026-11-28T00:00:00Z WRN Health check failed. error="HTTP request failed" ` +
    `targetURL=http://${address}:8000`;
  const log = [line("172.18.0.5"), "INF some other line", line("172.19.0.7")].join("\n");
  assert.deepEqual(targetsOutside(log, ["172.18.0.5", "172.19.0.7"]), []);
  assert.deepEqual(targetsOutside(log, ["172.18.0.5"]), ["172.19.0.7"]);
  assert.throws(
    () => targetsOutside("INF Configuration loaded\nINF Starting provider", ["172.18.0.5"]),
    RangeError,
  );
});
