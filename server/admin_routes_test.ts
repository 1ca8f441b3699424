import assert from "node:assert/strict";
import type { DeadLetterFilter, Overview } from "@users-pipeline/queue";
import type { ErrorCode } from "./api_error.ts";
import { createApp } from "./app.ts";
import type { DeadLetterAdmin } from "./admin_routes.ts";

const TOKEN = "s3cret-token-of-some-length";
const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

const OVERVIEW: Overview = {
  depth: { queued: 3, retry: 0, processing: 1, dead: 2 },
  oldest_queued_age_ms: 1_500,
  consumers: [{ id: "c1", alive: true, heartbeat_ttl_ms: 4_000, processing: 1, stored: 10 }],
  dead_letters_by_reason: { invalid_item: 2 },
  stored_total: 10,
};

/** An app with admin routes over fakes, and the calls they received. */
function adminApp() {
  const calls: [string, ...unknown[]][] = [];
  const deadLetters: DeadLetterAdmin = {
    list: (offset, limit) => {
      calls.push(["list", offset, limit]);
      return Promise.resolve({
        total: 2,
        byReason: { invalid_item: 2 },
        offset,
        letters: [{ raw: "junk" }],
      });
    },
    requeue: (filter: DeadLetterFilter) => (calls.push(["requeue", filter]), Promise.resolve(2)),
    purge: (filter: DeadLetterFilter) => (calls.push(["purge", filter]), Promise.resolve(1)),
  };
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    admin: { token: TOKEN, deadLetters, overview: () => Promise.resolve(OVERVIEW) },
  });
  return { app, calls };
}

const AUTH = { Authorization: `Bearer ${TOKEN}` };

function post(body: string) {
  return { method: "POST", body, headers: { ...AUTH, "Content-Type": "application/json" } };
}

Deno.test("adminRoutes() answers 401 with WWW-Authenticate to a missing or wrong token", async () => {
  const { app, calls } = adminApp();
  for (
    const headers of [
      {} as Record<string, string>,
      { Authorization: "Bearer wrong" },
      { Authorization: `Bearer ${TOKEN}x` },
      { Authorization: `Basic ${TOKEN}` },
      { Authorization: TOKEN },
    ]
  ) {
    const res = await app.request("/admin/overview", { headers });
    assert.equal(res.status, 401, JSON.stringify(headers));
    assert.equal(res.headers.get("WWW-Authenticate"), 'Bearer realm="admin"');
    const body = await res.json();
    assert.match(body.error, /Bearer/);
    assert.equal(body.code, "unauthorized");
  }
  const purge = await app.request("/admin/dead-letters/purge", { method: "POST", body: "{}" });
  assert.equal(purge.status, 401);
  assert.deepEqual(calls, []);
});

Deno.test("adminRoutes() serves the overview to the right token", async () => {
  const { app } = adminApp();
  const res = await app.request("/admin/overview", { headers: AUTH });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("Cache-Control"), "no-store");
  assert.deepEqual(await res.json(), OVERVIEW);
});

Deno.test("adminRoutes() lists dead letters by page, 400 for a bad page", async () => {
  const { app, calls } = adminApp();
  const res = await app.request("/admin/dead-letters?offset=40&limit=20", { headers: AUTH });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {
    total: 2,
    by_reason: { invalid_item: 2 },
    offset: 40,
    letters: [{ raw: "junk" }],
  });
  await app.request("/admin/dead-letters", { headers: AUTH });
  assert.deepEqual(calls, [["list", 40, 20], ["list", 0, 20]]);
  for (const query of ["limit=0", "limit=1001", "offset=-1", "offset=x"]) {
    const bad = await app.request(`/admin/dead-letters?${query}`, { headers: AUTH });
    assert.equal(bad.status, 400, query);
    assert.equal((await bad.json()).code, "invalid_query", query);
  }
});

Deno.test("adminRoutes() requeues and purges all, by reason, by ids or by records", async () => {
  const { app, calls } = adminApp();
  const all = await app.request("/admin/dead-letters/requeue", post("{}"));
  assert.deepEqual(await all.json(), { requeued: 2 });
  await app.request(
    "/admin/dead-letters/requeue",
    post(JSON.stringify({ reason: "database_refused" })),
  );
  const purged = await app.request(
    "/admin/dead-letters/purge",
    post(JSON.stringify({ ids: [ID.toUpperCase()] })),
  );
  assert.deepEqual(await purged.json(), { purged: 1 });
  const record = '{"payload":"poison","kind":"invalid_item"}';
  await app.request("/admin/dead-letters/purge", post(JSON.stringify({ records: [record] })));
  assert.deepEqual(calls, [
    ["requeue", {}],
    ["requeue", { reason: "database_refused" }],
    ["purge", { ids: [ID] }],
    ["purge", { records: [record] }],
  ]);
});

Deno.test("adminRoutes() answers 400 to a filter it cannot read, and acts on none", async () => {
  const { app, calls } = adminApp();
  const cases: [string, ErrorCode][] = [
    ["", "invalid_json"],
    ["not json", "invalid_json"],
    ['{"reason": "bad luck"}', "invalid_filter"],
    ['{"ids": []}', "invalid_filter"],
    ['{"ids": ["nope"]}', "invalid_filter"],
    ['{"records": []}', "invalid_filter"],
    ['{"records": [""]}', "invalid_filter"],
    ['{"records": [42]}', "invalid_filter"],
    ['{"kind": "invalid_item"}', "invalid_filter"],
  ];
  for (const [body, code] of cases) {
    const res = await app.request("/admin/dead-letters/purge", post(body));
    assert.equal(res.status, 400, body);
    const answer = await res.json();
    assert.ok(answer.error, body);
    assert.equal(answer.code, code, body);
  }
  assert.deepEqual(calls, []);
});

Deno.test("adminRoutes() answers 503 queue_unavailable with Retry-After while Redis fails", async () => {
  const down = () => Promise.reject(new Error("Connection is closed."));
  const reported: unknown[] = [];
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    admin: {
      token: TOKEN,
      deadLetters: { list: down, requeue: down, purge: down },
      overview: down,
    },
    onUnexpectedError: (error) => reported.push(error),
  });
  const requests: [string, RequestInit][] = [
    ["/admin/overview", { headers: AUTH }],
    ["/admin/dead-letters", { headers: AUTH }],
    ["/admin/dead-letters/requeue", post("{}")],
    ["/admin/dead-letters/purge", post("{}")],
  ];
  for (const [path, init] of requests) {
    const res = await app.request(path, init);
    assert.equal(res.status, 503, path);
    assert.equal(res.headers.get("Retry-After"), "1", path);
    assert.equal((await res.json()).code, "queue_unavailable", path);
  }
  assert.deepEqual(reported, [], "an outage is not a bug");
});
