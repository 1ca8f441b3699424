import assert from "node:assert/strict";
import type { UserEnvelope } from "@users-pipeline/queue";
import { createApp, type CredentialRefusal } from "./app.ts";
import { bearerCheck, MAX_AUTHORIZATION_BYTES, parseClientKeys } from "./client_keys.ts";
import { ApiMetrics } from "./metrics.ts";

const ADA_KEY = "ada-key-0123456789abcdef0123456789abcdef";
const LIN_KEY = "lin-key-0123456789abcdef0123456789abcdef";
const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

Deno.test("parseClientKeys() reads a name and a key a line, skipping comments and blank lines", () => {
  const text = `# the clients\n\nada ${ADA_KEY}\n  lin\t${LIN_KEY}   # the second\n` +
    `cy ${ADA_KEY}#1\n`;
  assert.deepEqual(parseClientKeys(text), [
    { name: "ada", key: ADA_KEY },
    { name: "lin", key: LIN_KEY },
    // A `#` inside a key is the key's.
    { name: "cy", key: `${ADA_KEY}#1` },
  ]);
  assert.deepEqual(parseClientKeys(""), []);
});

Deno.test("parseClientKeys() names the variable and the line of a bad entry, never its key", () => {
  const first = `ada ${ADA_KEY}\n`;
  const bad: [string, RegExp][] = [
    [`${first}ada`, /line 2: must be `<name> <key>`/],
    [`${first}lin ${LIN_KEY} extra`, /line 2: must be `<name> <key>`/],
    [`# a comment\nAda ${ADA_KEY}`, /line 2: the name must match/],
    [`\n${"a".repeat(64)} ${ADA_KEY}`, /line 2: the name must match/],
    [`${first}lin short-key`, /line 2: the key must be 32 to 512 printable ASCII/],
    [`${first}lin ${LIN_KEY}é`, /line 2: the key must be 32 to 512/],
    [`${first}lin ${"k".repeat(513)}`, /line 2: the key must be 32 to 512/],
    [`${first}lin ${ADA_KEY}`, /line 2: the key is another client's too/],
    [`${first}ada ${LIN_KEY}`, /line 2: the name ada is given twice/],
  ];
  for (const [text, message] of bad) {
    const line = text.split("\n")[1]!.slice(0, 12);
    assert.throws(() => parseClientKeys(text, "CLIENT_KEYS_FILE"), (error: Error) => {
      assert.ok(error instanceof TypeError, line);
      assert.match(error.message, /^Cannot start server: CLIENT_KEYS_FILE /, line);
      assert.match(error.message, message, line);
      for (const key of [ADA_KEY, LIN_KEY, "short-key"]) {
        assert.ok(!error.message.includes(key), `${line}: the message shows a key`);
      }
      return true;
    });
  }
});

Deno.test("bearerCheck() names the client of a right key, and says why not for anything else", () => {
  const check = bearerCheck([{ name: "ada", key: ADA_KEY }, { name: "lin", key: LIN_KEY }]);
  assert.deepEqual(check(`Bearer ${ADA_KEY}`), { client: "ada" });
  assert.deepEqual(check(`bearer  ${LIN_KEY} `), { client: "lin" });
  assert.deepEqual(check(undefined), { refused: "key_missing" });
  assert.deepEqual(check(`Basic ${ADA_KEY}`), { refused: "key_missing" });
  assert.deepEqual(check(ADA_KEY), { refused: "key_missing" });
  assert.deepEqual(check(`Bearer ${ADA_KEY}x`), { refused: "key_invalid" });
  assert.deepEqual(check(`Bearer ${ADA_KEY.slice(0, -1)}`), { refused: "key_invalid" });
  assert.deepEqual(check(`Bearer ${"x".repeat(MAX_AUTHORIZATION_BYTES - 7)}`), {
    refused: "key_invalid",
  });
  assert.deepEqual(check(`Bearer ${"x".repeat(MAX_AUTHORIZATION_BYTES - 6)}`), {
    refused: "authorization_too_large",
  });
});

/** An app with two clients' keys over an array queue, and what it accepted and logged. */
function keyedApp() {
  const accepted: UserEnvelope[] = [];
  const refusals: CredentialRefusal[] = [];
  const metrics = new ApiMetrics({ replica: "r", processMetrics: false, clients: ["ada", "lin"] });
  const app = createApp({
    accept: (user) => Promise.resolve(void accepted.push(user)),
    userStatus: (id) => Promise.resolve(id === ID ? { status: "queued", id } : undefined),
    listUsers: () => Promise.resolve([]),
    batch: {
      accept: (users) => Promise.resolve(users.map((user) => void accepted.push(user))),
      acceptOnce: () => Promise.reject(new Error("not called by these tests")),
    },
    clientKeys: [{ name: "ada", key: ADA_KEY }, { name: "lin", key: LIN_KEY }],
    onCredentialRefused: (refusal) => refusals.push(refusal),
    metrics,
  });
  return { app, accepted, refusals };
}

const REQUESTS: [string, string, string?][] = [
  ["POST", "/users", '{"name": "Ada"}'],
  ["POST", "/users/batch", '[{"name": "Ada"}, {"name": "Lin"}]'],
  ["GET", `/users/${ID}`],
];

Deno.test("createApp() with client keys refuses a missing, wrong, queried or oversized key before queueing", async () => {
  const { app, accepted, refusals } = keyedApp();
  const cases: [Record<string, string>, string, number, string, string | null][] = [
    [{}, "", 401, "key_missing", 'Bearer realm="users"'],
    [{ Authorization: `Basic ${ADA_KEY}` }, "", 401, "key_missing", 'Bearer realm="users"'],
    [
      { Authorization: `Bearer ${ADA_KEY}x` },
      "",
      401,
      "key_invalid",
      'Bearer realm="users", error="invalid_token"',
    ],
    // Never accepted in the query, even beside a right header: the query is in the access logs.
    [{ Authorization: `Bearer ${ADA_KEY}` }, `?key=${ADA_KEY}`, 400, "key_in_query", null],
    [{}, `?api_key=${ADA_KEY}`, 400, "key_in_query", null],
    [{}, `?access_token=${ADA_KEY}`, 400, "key_in_query", null],
    [{}, "?token=x", 400, "key_in_query", null],
    [
      { Authorization: `Bearer ${"x".repeat(2_000)}` },
      "",
      431,
      "authorization_too_large",
      null,
    ],
  ];
  for (const [method, path, body] of REQUESTS) {
    for (const [headers, query, status, code, authenticate] of cases) {
      const where = `${method} ${path}${query} ${JSON.stringify(headers).slice(0, 40)}`;
      const res = await app.request(path + query, { method, body, headers });
      assert.equal(res.status, status, where);
      assert.equal((await res.json()).code, code, where);
      assert.equal(res.headers.get("WWW-Authenticate"), authenticate, where);
    }
  }
  assert.deepEqual(accepted, [], "a refused request queued nothing");
  assert.deepEqual(
    refusals.map((refusal) => refusal.code),
    REQUESTS.flatMap(() => cases.map(([, , , code]) => code)),
  );
  // The address comes from the proxy's header when there is one; never a key in a record.
  assert.ok(refusals.every((refusal) => refusal.address === "unknown"));
  const withProxy = await app.request("/users", {
    method: "POST",
    headers: { "X-Real-Ip": "203.0.113.7" },
  });
  assert.equal(withProxy.status, 401);
  assert.equal(refusals.at(-1)?.address, "203.0.113.7");
  assert.ok(!JSON.stringify(refusals).includes(ADA_KEY));
});

Deno.test("createApp() with client keys takes a right key's request and counts it under the client's name", async () => {
  const { app, accepted } = keyedApp();
  for (const [method, path, body] of REQUESTS) {
    const res = await app.request(path, {
      method,
      body,
      headers: { Authorization: `Bearer ${LIN_KEY}` },
    });
    assert.equal(res.status, method === "POST" ? 202 : 200, `${method} ${path}`);
  }
  assert.deepEqual(accepted.map((user) => user.name), ["Ada", "Ada", "Lin"]);
  const metrics = await (await app.request("/metrics")).text();
  const users = (client: string, outcome: string) =>
    Number(
      new RegExp(
        `^users_pipeline_client_users_total\\{client="${client}",outcome="${outcome}"[^}]*\\} (\\d+)$`,
        "m",
      ).exec(metrics)?.[1],
    );
  assert.equal(users("lin", "accepted"), 3);
  assert.equal(users("ada", "accepted"), 0);
  assert.ok(!metrics.includes(LIN_KEY) && !metrics.includes(ADA_KEY), "no key in the metrics");
});

Deno.test("createApp() without client keys takes the course's request as before, as anonymous", async () => {
  const accepted: UserEnvelope[] = [];
  const metrics = new ApiMetrics({ replica: "r", processMetrics: false });
  const app = createApp({
    accept: (user) => Promise.resolve(void accepted.push(user)),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    metrics,
  });
  const res = await app.request("/users?token=ignored", {
    method: "POST",
    body: '{"name": "Queueing"}',
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
  });
  assert.equal(res.status, 202);
  assert.equal(accepted.length, 1);
  assert.match(
    await (await app.request("/metrics")).text(),
    /^users_pipeline_client_users_total\{client="anonymous",outcome="accepted"[^}]*\} 1$/m,
  );
});
