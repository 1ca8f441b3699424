import assert from "node:assert/strict";
import type { Hono } from "@hono/hono";
import {
  IdempotencyConflictError,
  isUuid,
  QueueFullError,
  type UserEnvelope,
  WriteUnconfirmedError,
} from "@users-pipeline/queue";
import { Readiness } from "@users-pipeline/runtime/readiness";
import { ERROR_CODES, type ErrorCode } from "./api_error.ts";
import { createApp } from "./app.ts";
import { ApiMetrics } from "./metrics.ts";
import { userStatusReader } from "./user_status.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";
const ADA = { id: ID, name: "Ada", enqueued_at: new Date(0), stored_at: new Date(1) };

/** The reads of an app whose tests do not read users. */
const NO_USERS = {
  userStatus: () => Promise.resolve(undefined),
  listUsers: () => Promise.resolve([]),
};

const ADMIN_TOKEN = "s3cret-token-of-some-length";
const unread = () => Promise.reject(new Error("not read by these tests"));
/** Admin options whose routes these tests do not call: with them, `GET /users` exists. */
const ADMIN = {
  token: ADMIN_TOKEN,
  deadLetters: { list: unread, requeue: unread, purge: unread },
  overview: unread,
};
/** A request with the admin token. */
const AS_ADMIN = { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } };

/** The `POST /users` an app's `GET /metrics` counts as refused, by reason (those above 0). */
async function refusals(app: Hono): Promise<Record<string, number>> {
  const text = await (await app.request("/metrics")).text();
  const counts = text.matchAll(
    /^users_pipeline_enqueue_rejections_total\{reason="(\w+)"[^}]*\} (\d+)$/gm,
  );
  return Object.fromEntries(
    [...counts].filter(([, , n]) => n !== "0").map(([, reason, n]) => [reason, Number(n)]),
  );
}

/** An app whose queue is an array, plus what it accepted. */
function fakeApp(accept?: (user: UserEnvelope) => Promise<void>) {
  const accepted: UserEnvelope[] = [];
  const app = createApp({
    accept: accept ?? ((user) => {
      accepted.push(user);
      return Promise.resolve();
    }),
    userStatus: (id) => Promise.resolve(id === ID ? { status: "stored", ...ADA } : undefined),
    listUsers: (limit) => Promise.resolve([ADA].slice(0, limit)),
    bodyLimitBytes: 1024,
    discardLimitBytes: 8192,
    newId: () => ID,
  });
  return { app, accepted };
}

/** A request body of `chunks` chunks of 1 KiB, pulled only when read, and what was read of it. */
function countedBody(chunks: number) {
  const counted = { read: 0, toTheEnd: false, cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (counted.read === chunks * 1024) {
        counted.toTheEnd = true;
        return controller.close();
      }
      counted.read += 1024;
      controller.enqueue(new Uint8Array(1024).fill(0x20));
    },
    cancel() {
      counted.cancelled = true;
    },
  }, { highWaterMark: 0 });
  return { body, counted };
}

/** A POST of a counted body, with its Content-Length or (`length` undefined) chunked. */
function postCounted(body: ReadableStream<Uint8Array>, length?: number): RequestInit {
  const headers: Record<string, string> = length === undefined ? {} : {
    "Content-Length": String(length),
  };
  return { method: "POST", body, headers, duplex: "half" } as RequestInit;
}

function post(body: string, headers: Record<string, string> = {}) {
  return { method: "POST", body, headers };
}

/** A 503 that may follow a push: it names the minted id, in the body and as Location. */
function assertSettleable(res: Response, body: { id?: unknown }) {
  assert.ok(typeof body.id === "string" && isUuid(body.id), `an id: ${JSON.stringify(body)}`);
  assert.equal(res.headers.get("Location"), `/users/${body.id}`);
}

/** An error answer's body: its message matches, and it carries exactly this code. */
function assertError(body: { error?: unknown; code?: unknown }, message: RegExp, code: ErrorCode) {
  assert.equal(typeof body.error, "string", JSON.stringify(body));
  assert.match(body.error as string, message);
  assert.equal(body.code, code, JSON.stringify(body));
}

Deno.test("createApp() accepts the course's curl body, sent as form-urlencoded, with 202", async () => {
  const { app, accepted } = fakeApp();
  const res = await app.request(
    "/users",
    post('{"name": "Queueing"}', { "Content-Type": "application/x-www-form-urlencoded" }),
  );
  assert.equal(res.status, 202);
  assert.deepEqual(await res.json(), { id: ID });
  assert.equal(res.headers.get("Content-Type"), "application/json");
  assert.equal(res.headers.get("Location"), `/users/${ID}`);
  assert.equal(accepted.length, 1);
  assert.equal(accepted[0]?.name, "Queueing");
  assert.equal(accepted[0]?.id, ID);
});

Deno.test("createApp() accepts JSON content types and a missing one", async () => {
  for (
    const type of [undefined, "application/json", "application/json; charset=UTF-8", "text/plain"]
  ) {
    const { app } = fakeApp();
    const res = await app.request(
      "/users",
      post('{"name":"Ada"}', type ? { "Content-Type": type } : {}),
    );
    assert.equal(res.status, 202, String(type));
  }
});

Deno.test("createApp() stores the trimmed name", async () => {
  const { app, accepted } = fakeApp();
  await app.request("/users", post('{"name": "  Ada Lovelace \\n"}'));
  assert.equal(accepted[0]?.name, "Ada Lovelace");
});

Deno.test("createApp() answers each bad body with a precise 400 and its code, and accepts nothing", async () => {
  const cases: [string, RegExp, ErrorCode][] = [
    ["{not json", /valid JSON/, "invalid_json"],
    ["", /valid JSON/, "invalid_json"],
    ["[1,2]", /JSON object/, "invalid_body"],
    ['"Ada"', /JSON object/, "invalid_body"],
    ["{}", /"name" is required/, "invalid_body"],
    ['{"name": 42}', /"name" must be a string/, "invalid_body"],
    ['{"name": null}', /"name" must be a string/, "invalid_body"],
    ['{"name": "Ada", "admin": true}', /unexpected field "admin"/, "invalid_body"],
    ['{"name": ""}', /empty/, "invalid_name"],
    ['{"name": "   \\t "}', /empty/, "invalid_name"],
    [`{"name": "${"x".repeat(201)}"}`, /at most 200/, "invalid_name"],
    ['{"name": "a\\u0000b"}', /NUL/, "invalid_name"],
    ['{"name": "a\\ud800b"}', /lone surrogate/, "invalid_name"],
  ];
  for (const [body, message, code] of cases) {
    const { app, accepted } = fakeApp();
    const res = await app.request("/users", post(body, { "Content-Type": "application/json" }));
    assert.equal(res.status, 400, body);
    const answer = await res.json();
    assert.match(answer.error, message, body);
    assert.equal(answer.code, code, body);
    assert.equal(accepted.length, 0, body);
  }
});

Deno.test("createApp() answers 413 to a body over the limit", async () => {
  const { app, accepted } = fakeApp();
  const res = await app.request("/users", post(JSON.stringify({ name: "x".repeat(2000) })));
  assert.equal(res.status, 413);
  assertError(await res.json(), /at most 1024 bytes/, "body_too_large");
  assert.equal(accepted.length, 0);
});

Deno.test("createApp() answers 413 to a Content-Length over the limit, and 202 to the same body with its length", async () => {
  const { app, accepted } = fakeApp();
  const body = '{"name": "Ada"}';
  const refused = await app.request("/users", post(body, { "Content-Length": "2000" }));
  assert.equal(refused.status, 413);
  assertError(await refused.json(), /at most 1024 bytes/, "body_too_large");
  const res = await app.request("/users", post(body, { "Content-Length": String(body.length) }));
  assert.equal(res.status, 202);
  assert.deepEqual(accepted.map((user) => user.name), ["Ada"]);
});

Deno.test("createApp() reads a body over the limit to its end, up to discardLimitBytes, before its 413", async () => {
  for (const length of [6 * 1024, undefined]) {
    const { app, accepted } = fakeApp();
    const { body, counted } = countedBody(6);
    const res = await app.request("/users", postCounted(body, length));
    assert.equal(res.status, 413);
    assert.ok(counted.toTheEnd, `read ${counted.read} of 6144 bytes (length ${length})`);
    // A plain answer: its connection stays open for the next request.
    assertError(await res.json(), /at most 1024 bytes/, "body_too_large");
    assert.equal(accepted.length, 0);
  }
});

Deno.test("createApp() reads no more than discardLimitBytes of a body far over it, and cuts its connection after the 413", async () => {
  for (const length of [100 * 1024, undefined]) {
    const { app, accepted } = fakeApp();
    const { body, counted } = countedBody(100);
    const res = await app.request("/users", postCounted(body, length));
    assert.equal(res.status, 413);
    assert.equal(res.headers.get("Content-Type"), "application/json");
    // A length over the bound says it all: nothing is read; a chunked body, up to the bound.
    assert.ok(counted.read <= (length === undefined ? 8192 + 1024 : 0), `read ${counted.read}`);
    assert.ok(counted.cancelled, "the rest of the body is cancelled");
    const reader = res.body!.getReader();
    const first = await reader.read();
    const answer = JSON.parse(new TextDecoder().decode(first.value));
    assertError(answer, /at most 1024 bytes/, "body_too_large");
    await assert.rejects(reader.read(), Deno.errors.ConnectionAborted);
    assert.equal(accepted.length, 0);
  }
});

Deno.test("createApp() answers 413 to a streamed body that grows over the limit", async () => {
  const { app, accepted } = fakeApp();
  const chunk = new TextEncoder().encode(" ".repeat(600));
  const body = ReadableStream.from([new TextEncoder().encode('{"name": "Ada"'), chunk, chunk]);
  const res = await app.request("/users", { method: "POST", body, duplex: "half" } as RequestInit);
  assert.equal(res.status, 413);
  assertError(await res.json(), /at most 1024 bytes/, "body_too_large");
  assert.equal(accepted.length, 0);
});

Deno.test("createApp() answers 415 to a content type it cannot read as JSON", async () => {
  for (
    const type of [
      "multipart/form-data; boundary=x",
      "application/xml",
      "text/html",
      "application/json; charset=latin1",
    ]
  ) {
    const { app, accepted } = fakeApp();
    const res = await app.request("/users", post('{"name":"Ada"}', { "Content-Type": type }));
    assert.equal(res.status, 415, type);
    assertError(await res.json(), /not supported/, "unsupported_media_type");
    assert.equal(accepted.length, 0);
  }
});

Deno.test("createApp() answers 503 with Retry-After when the queue is full", async () => {
  const { app } = fakeApp(() => Promise.reject(new QueueFullError(10)));
  const res = await app.request("/users", post('{"name":"Ada"}'));
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  const body = await res.json();
  assertError(body, /full/, "queue_full");
  // Refused before anything was pushed: nothing to settle.
  assert.equal(body.id, undefined);
  assert.equal(res.headers.get("Location"), null);
});

Deno.test("createApp() answers 503, not 202, to a push fewer replicas than asked confirmed", async () => {
  const app = createApp({
    accept: () =>
      Promise.reject(
        new WriteUnconfirmedError("push", { wanted: 1, confirmed: 0, timeoutMs: 200, pushed: 1 }),
      ),
    ...NO_USERS,
    metrics: new ApiMetrics({ replica: "server-1", processMetrics: false }),
  });
  const res = await app.request("/users", post('{"name":"Ada"}'));
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  const body = await res.json();
  assertError(body, /could not confirm the user on enough replicas/, "unconfirmed");
  assertSettleable(res, body);
  assert.deepEqual(await refusals(app), { unconfirmed: 1 });
});

Deno.test("createApp() answers 503 with Retry-After when Redis fails", async () => {
  const tried: string[] = [];
  const app = createApp({
    accept: (user) => {
      tried.push(user.id);
      return Promise.reject(new Error("Connection is closed."));
    },
    ...NO_USERS,
    metrics: new ApiMetrics({ replica: "server-1", processMetrics: false }),
  });
  const res = await app.request("/users", post('{"name":"Ada"}'));
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  const body = await res.json();
  assertError(body, /unavailable/, "queue_unavailable");
  assertSettleable(res, body);
  assert.deepEqual(tried, [body.id], "the id of the user it tried to push");
  assert.deepEqual(await refusals(app), { unavailable: 1 });
});

Deno.test("createApp() answers 503 within acceptTimeoutMs when the queue never answers", async () => {
  const app = createApp({
    accept: () => new Promise(() => {}),
    ...NO_USERS,
    acceptTimeoutMs: 30,
    metrics: new ApiMetrics({ replica: "server-1", processMetrics: false }),
  });
  const started = performance.now();
  const res = await app.request("/users", post('{"name":"Ada"}'));
  const elapsed = performance.now() - started;
  // Answered by the bound, not before it: nothing else refuses a push that never settles (a timer
  // counts from the event loop's time, which may be up to a millisecond behind).
  assert.ok(elapsed >= 29 && elapsed < 1_000, `answered after ${elapsed} ms`);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  const body = await res.json();
  assertError(body, /unavailable/, "queue_unavailable");
  assertSettleable(res, body);
  assert.deepEqual(await refusals(app), { unavailable: 1 });
});

Deno.test("createApp() answers /healthz 200 and /readyz as its readiness says", async () => {
  let redisUp = true;
  const readiness = new Readiness({
    redis: () => redisUp ? Promise.resolve() : Promise.reject(new Error("Connection is closed.")),
  }, { timeoutMs: 100 });
  const app = createApp({
    accept: () => Promise.resolve(),
    ...NO_USERS,
    readiness,
  });
  assert.deepEqual(await (await app.request("/healthz")).json(), { status: "alive" });
  const ready = await app.request("/readyz");
  assert.equal(ready.status, 200);
  assert.deepEqual(await ready.json(), { status: "ready" });
  redisUp = false;
  const down = await app.request("/readyz");
  assert.equal(down.status, 503);
  assert.equal(down.headers.get("Retry-After"), "1");
  assert.deepEqual(await down.json(), {
    status: "not ready",
    reason: "redis: Connection is closed.",
  });
  redisUp = true;
  readiness.drain();
  assert.equal((await app.request("/readyz")).status, 503);
  assert.equal((await app.request("/healthz")).status, 200, "alive while draining");
  assert.equal((await app.request("/health")).status, 404, "the old path is gone");
});

Deno.test("createApp() mints a distinct UUIDv7 per request by default", async () => {
  const accepted: UserEnvelope[] = [];
  const app = createApp({
    accept: (user) => Promise.resolve(void accepted.push(user)),
    ...NO_USERS,
  });
  await app.request("/users", post('{"name":"a"}'));
  await app.request("/users", post('{"name":"b"}'));
  assert.ok(isUuid(accepted[0]!.id), accepted[0]!.id);
  // The version digit: v7 ids sort by time, so the primary key index grows at one end.
  assert.equal(accepted[0]!.id[14], "7");
  assert.notEqual(accepted[0]!.id, accepted[1]!.id);
});

Deno.test("createApp() reports a stored user, 404 for an unknown one, 400 for a bad id", async () => {
  const { app } = fakeApp();
  const found = await app.request(`/users/${ID}`);
  assert.equal(found.status, 200);
  const body = await found.json();
  assert.equal(body.status, "stored");
  assert.equal(body.name, "Ada");
  const unknown = await app.request("/users/01934d5e-0000-7a1e-9c3f-1a2b3c4d5e6f");
  assert.equal(unknown.status, 404);
  assertError(await unknown.json(), /no user with this id/, "user_not_found");
  const bad = await app.request("/users/nope");
  assert.equal(bad.status, 400);
  assertError(await bad.json(), /must be a UUID/, "invalid_id");
});

Deno.test("createApp() looks a user up by an uppercase id as by its lowercase form", async () => {
  const { app } = fakeApp();
  const found = await app.request(`/users/${ID.toUpperCase()}`);
  assert.equal(found.status, 200);
  assert.equal((await found.json()).id, ID);
});

Deno.test("createApp() answers 500 to an unexpected error and reports it", async () => {
  const reported: unknown[] = [];
  const bug = new TypeError("Cannot read properties of undefined");
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.reject(bug),
    listUsers: () => Promise.resolve([]),
    onUnexpectedError: (error) => reported.push(error),
  });
  const res = await app.request(`/users/${ID}`);
  assert.equal(res.status, 500);
  assert.deepEqual(await res.json(), { error: "internal error", code: "internal_error" });
  assert.deepEqual(reported, [bug]);
});

Deno.test("createApp() answers unknown routes and methods in JSON", async () => {
  const { app } = fakeApp();
  const missing = await app.request("/nowhere");
  assert.equal(missing.status, 404);
  assertError(await missing.json(), /no route for GET \/nowhere/, "not_found");
  const wrong = await app.request("/users", { method: "DELETE" });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get("Allow"), "POST");
  assertError(await wrong.json(), /DELETE is not allowed/, "method_not_allowed");
});

Deno.test("createApp() answers 400 to a body that is not valid UTF-8", async () => {
  const { app, accepted } = fakeApp();
  // A lone surrogate encoded as if it were a character (ED A0 80): not UTF-8.
  const body = new Uint8Array([
    ...new TextEncoder().encode('{"name": "Ada '),
    0xed,
    0xa0,
    0x80,
    ...new TextEncoder().encode('"}'),
  ]);
  const res = await app.request("/users", { method: "POST", body });
  assert.equal(res.status, 400);
  assertError(await res.json(), /UTF-8/, "invalid_utf8");
  assert.equal(accepted.length, 0);
});

Deno.test("createApp() answers a queued or dead user's status with 200", async () => {
  const dead = {
    status: "dead",
    id: ID,
    kind: "database_refused",
    reason: "database refused the row: boom",
    dead_at: "2025-01-01T00:00:00.000Z",
  } as const;
  let status: "queued" | "dead" = "queued";
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: (id) => Promise.resolve(status === "queued" ? { status, id } : dead),
    listUsers: () => Promise.resolve([]),
  });
  assert.deepEqual(await (await app.request(`/users/${ID}`)).json(), { status: "queued", id: ID });
  status = "dead";
  const res = await app.request(`/users/${ID}`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), dead);
});

Deno.test("createApp() lists the newest users with limit 20 by default, 400 for a bad limit", async () => {
  const limits: number[] = [];
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: (limit) => Promise.resolve(void limits.push(limit)).then(() => [ADA]),
    admin: ADMIN,
  });
  const res = await app.request("/users", AS_ADMIN);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("Cache-Control"), "no-store");
  assert.deepEqual((await res.json()).users.map((u: { id: string }) => u.id), [ID]);
  assert.equal((await app.request("/users?limit=1000", AS_ADMIN)).status, 200);
  assert.deepEqual(limits, [20, 1000]);
  for (const bad of ["0", "1001", "-1", "ten", "1.5", ""]) {
    const refused = await app.request(`/users?limit=${bad}`, AS_ADMIN);
    assert.equal(refused.status, 400, `limit=${bad}`);
    assertError(
      await refused.json(),
      /limit must be a whole number from 1 to 1000/,
      "invalid_query",
    );
  }
  assert.deepEqual(limits, [20, 1000]);
});

Deno.test("createApp() lists stored users only to the admin token: 401 without it, 404 with no token set", async () => {
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([ADA]),
    admin: ADMIN,
  });
  for (const headers of [{}, { Authorization: "Bearer not-the-admin-token" }] as HeadersInit[]) {
    const res = await app.request("/users", { headers });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("WWW-Authenticate"), 'Bearer realm="admin"');
    assertError(await res.json(), /Authorization: Bearer/, "unauthorized");
  }
  const { app: noToken } = fakeApp();
  const res = await noToken.request("/users", AS_ADMIN);
  assert.equal(res.status, 404);
  assertError(await res.json(), /no route for GET \/users/, "not_found");
});

Deno.test("createApp() has no /admin routes without admin options", async () => {
  const { app } = fakeApp();
  const res = await app.request("/admin/overview", {
    headers: { Authorization: "Bearer anything-at-all-here" },
  });
  assert.equal(res.status, 404);
});

/** The error postgres.js rejects with when nothing listens on PostgreSQL's port. */
function connectionRefused(): Error {
  return Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), {
    code: "ECONNREFUSED",
  });
}

Deno.test("createApp() answers 503 database_unavailable with Retry-After, not 500, while PostgreSQL cannot be reached", async () => {
  const reported: unknown[] = [];
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: userStatusReader({
      indexed: () => Promise.resolve(undefined),
      findUser: () => Promise.reject(connectionRefused()),
    }),
    listUsers: () => Promise.reject(connectionRefused()),
    onUnexpectedError: (error) => reported.push(error),
    admin: ADMIN,
  });
  for (const path of [`/users/${ID}`, "/users"]) {
    const res = await app.request(path, AS_ADMIN);
    assert.equal(res.status, 503, path);
    assert.equal(res.headers.get("Retry-After"), "1", path);
    assertError(await res.json(), /database is unavailable/, "database_unavailable");
  }
  assert.deepEqual(reported, [], "an outage is not a bug");
});

Deno.test("createApp() answers a user's status 503 queue_unavailable while the queue's index cannot be read", async () => {
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: userStatusReader({
      indexed: () => Promise.reject(new Error("Connection is closed.")),
      findUser: () => Promise.reject(new Error("must not be read")),
    }),
    listUsers: () => Promise.resolve([]),
  });
  const res = await app.request(`/users/${ID}`);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  assertError(await res.json(), /queue is unavailable/, "queue_unavailable");
});

Deno.test("createApp() answers 500 when PostgreSQL answers a read with an error: a bug, not an outage", async () => {
  const reported: unknown[] = [];
  // undefined_table: the schema is not what the code expects, which no retry cures.
  const refused = Object.assign(new Error('relation "users" does not exist'), { code: "42P01" });
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: userStatusReader({ findUser: () => Promise.reject(refused) }),
    listUsers: () => Promise.resolve([]),
    onUnexpectedError: (error) => reported.push(error),
  });
  const res = await app.request(`/users/${ID}`);
  assert.equal(res.status, 500);
  assertError(await res.json(), /internal error/, "internal_error");
  assert.deepEqual(reported, [refused]);
});

Deno.test("createApp() gives every error answer a known code with that code's status", async () => {
  const { app } = fakeApp();
  const requests: [string, RequestInit?][] = [
    ["/users", post("{")],
    ["/users", post('{"name": ""}')],
    ["/users", post("x".repeat(2_000))],
    ["/users", post('{"name":"Ada"}', { "Content-Type": "application/xml" })],
    ["/users/nope"],
    ["/users/01934d5e-0000-7a1e-9c3f-1a2b3c4d5e6f"],
    ["/users?limit=0"],
    ["/users", { method: "PUT" }],
    ["/nowhere"],
    ["/admin/overview"],
  ];
  for (const [path, init] of requests) {
    const res = await app.request(path, init);
    const body = await res.json();
    const where = `${init?.method ?? "GET"} ${path}: ${res.status} ${JSON.stringify(body)}`;
    assert.ok(res.status >= 400, where);
    assert.ok(Object.hasOwn(ERROR_CODES, body.code), where);
    assert.equal(ERROR_CODES[body.code as ErrorCode].status, res.status, where);
  }
});

/**
 * An app whose keyed queue is a map from key to the id and name it queued, as
 * the push script keeps it; `hold` delays every keyed push until released.
 */
function keyedApp() {
  const records = new Map<string, { id: string; name: string }>();
  const pushed: UserEnvelope[] = [];
  let minted = 0;
  let held: Promise<void> = Promise.resolve();
  let release = () => {};
  const app = createApp({
    accept: () => Promise.reject(new Error("a keyed request must not take the unkeyed path")),
    acceptOnce: {
      newId: () => `0190b6e4-9e43-7c2e-a4f4-${String(++minted).padStart(12, "0")}`,
      async accept(user, key) {
        await held;
        const seen = records.get(key);
        if (seen !== undefined) {
          if (seen.name !== user.name) throw new IdempotencyConflictError(seen.id);
          return seen.id;
        }
        records.set(key, { id: user.id, name: user.name });
        pushed.push(user);
        return user.id;
      },
    },
    ...NO_USERS,
  });
  return {
    app,
    pushed,
    hold() {
      held = new Promise((resolve) => release = resolve);
    },
    release: () => release(),
  };
}

Deno.test("createApp() answers a repeated Idempotency-Key with the first 202, its id and Location, pushing nothing again", async () => {
  const { app, pushed } = keyedApp();
  const first = await app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k-1" }));
  assert.equal(first.status, 202);
  const { id } = await first.json();
  assert.equal(first.headers.get("Location"), `/users/${id}`);
  assert.equal(first.headers.get("Idempotent-Replayed"), null);
  // Again, with the name as the API stores it after trimming: the same user.
  const again = await app.request(
    "/users",
    post('{"name":"  Ada "}', { "Idempotency-Key": "k-1" }),
  );
  assert.equal(again.status, 202);
  assert.deepEqual(await again.json(), { id });
  assert.equal(again.headers.get("Location"), `/users/${id}`);
  assert.equal(again.headers.get("Idempotent-Replayed"), "true");
  assert.deepEqual(pushed.map((user) => user.id), [id]);
  // Another key is another user.
  const other = await app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k-2" }));
  assert.notEqual((await other.json()).id, id);
  assert.equal(pushed.length, 2);
});

Deno.test("createApp() gives two requests with one key in flight at once one id and one push", async () => {
  const { app, pushed, hold, release } = keyedApp();
  hold();
  const both = [1, 2].map(() =>
    app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k" }))
  );
  release();
  const answers = await Promise.all(both);
  assert.deepEqual(answers.map((res) => res.status), [202, 202]);
  const ids = await Promise.all(answers.map(async (res) => (await res.json()).id));
  assert.equal(ids[0], ids[1]);
  assert.equal(pushed.length, 1);
});

Deno.test("createApp() answers 422 idempotency_key_reused for a key's other name and 400 for a malformed key, queueing nothing", async () => {
  const { app, pushed } = keyedApp();
  await app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k" }));
  const reused = await app.request("/users", post('{"name":"Grace"}', { "Idempotency-Key": "k" }));
  assert.equal(reused.status, 422);
  assertError(
    await reused.json(),
    /already used for a user with another name/,
    "idempotency_key_reused",
  );
  for (const key of ["", "with space", "x".repeat(256), "naïve"]) {
    const res = await app.request("/users", post('{"name":"Lin"}', { "Idempotency-Key": key }));
    assert.equal(res.status, 400, key);
    assertError(await res.json(), /Idempotency-Key must be/, "invalid_idempotency_key");
  }
  assert.equal(pushed.length, 1);
});

Deno.test("createApp() refuses an Idempotency-Key with 400 where it cannot keep it (no acceptOnce), queueing nothing", async () => {
  const { app, accepted } = fakeApp();
  const res = await app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k" }));
  assert.equal(res.status, 400);
  assertError(await res.json(), /not taken by this server/, "invalid_idempotency_key");
  assert.equal(accepted.length, 0);
});

Deno.test("createApp() names, in an unconfirmed 503 for a key seen before, the id that key is queued under", async () => {
  const error = new WriteUnconfirmedError("push", {
    wanted: 1,
    confirmed: 0,
    timeoutMs: 200,
    pushed: 0,
  });
  error.queuedAs = "0190b6e4-9e43-7c2e-a4f4-3f6c0d2e8b11";
  const app = createApp({
    accept: () => Promise.reject(new Error("a keyed request must not take the unkeyed path")),
    acceptOnce: { newId: () => ID, accept: () => Promise.reject(error) },
    ...NO_USERS,
  });
  const res = await app.request("/users", post('{"name":"Ada"}', { "Idempotency-Key": "k" }));
  assert.equal(res.status, 503);
  const body = await res.json();
  assertError(body, /could not confirm/, "unconfirmed");
  assert.equal(body.id, error.queuedAs);
  assert.equal(res.headers.get("Location"), `/users/${error.queuedAs}`);
});
