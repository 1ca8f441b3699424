import assert from "node:assert/strict";
import { QueueFullError, type UserEnvelope, WriteUnconfirmedError } from "@users-pipeline/queue";
import { ApiError } from "./api_error.ts";
import { createApp } from "./app.ts";
import { ApiMetrics, rejectionOf } from "./metrics.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";
const OTHER_ID = "01934d5e-7b7c-7a1e-9c3f-000000000000";

/** An app with metrics whose `accept` does what the test says. */
function meteredApp(accept: (user: UserEnvelope) => Promise<void> = () => Promise.resolve()) {
  const metrics = new ApiMetrics({ replica: "server-7", processMetrics: false });
  const app = createApp({
    accept,
    userStatus: (id) =>
      Promise.resolve(
        id === ID
          ? { status: "stored", id, name: "Ada", enqueued_at: new Date(0), stored_at: new Date(1) }
          : undefined,
      ),
    listUsers: () => Promise.resolve([]),
    newId: () => ID,
    metrics,
  });
  return { app, metrics };
}

/** The value of one series (`undefined` if absent), labels matched exactly apart from the defaults. */
async function valueOf(
  metrics: ApiMetrics,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return metric?.values.find((sample) =>
    (sample as { metricName?: string }).metricName === undefined &&
    Object.keys(sample.labels).length === Object.keys(labels).length &&
    Object.entries(labels).every(([key, value]) => String(sample.labels[key]) === value)
  )?.value;
}

function postUser(body = '{"name":"Ada"}') {
  return { method: "POST", body, headers: { "Content-Type": "application/json" } };
}

Deno.test("createApp() with metrics serves GET /metrics in Prometheus' text format", async () => {
  const { app } = meteredApp();
  const res = await app.request("/metrics");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("Content-Type") ?? "", /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  assert.match(text, /^# TYPE users_pipeline_http_requests_total counter$/m);
  assert.match(
    text,
    /^users_pipeline_enqueue_rejections_total\{reason="full",service="server",replica="server-7"\} 0$/m,
  );
});

Deno.test("createApp() without metrics has no /metrics route", async () => {
  const app = createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
  });
  assert.equal((await app.request("/metrics")).status, 404);
});

Deno.test("ApiMetrics counts requests by route pattern and status, never by id", async () => {
  const { app, metrics } = meteredApp();
  assert.equal((await app.request("/users", postUser())).status, 202);
  assert.equal((await app.request(`/users/${ID}`)).status, 200);
  assert.equal((await app.request(`/users/${OTHER_ID}`)).status, 404);
  assert.equal((await app.request(`/no/such/${ID}`)).status, 404);
  assert.equal((await app.request("/users", { method: "PROPFIND" })).status, 404);

  const requests = "users_pipeline_http_requests_total";
  assert.equal(
    await valueOf(metrics, requests, { method: "POST", route: "/users", status: "202" }),
    1,
  );
  assert.equal(
    await valueOf(metrics, requests, { method: "GET", route: "/users/:id", status: "200" }),
    1,
  );
  assert.equal(
    await valueOf(metrics, requests, { method: "GET", route: "/users/:id", status: "404" }),
    1,
  );
  assert.equal(
    await valueOf(metrics, requests, { method: "GET", route: "unmatched", status: "404" }),
    1,
  );
  assert.equal(
    await valueOf(metrics, requests, { method: "other", route: "unmatched", status: "404" }),
    1,
  );
  assert.equal(await valueOf(metrics, "users_pipeline_users_accepted_total"), 1);

  const text = await (await app.request("/metrics")).text();
  assert.ok(!text.includes(ID) && !text.includes(OTHER_ID), "an id became a label value");
  assert.ok(!text.includes("/no/such"), "a raw path became a label value");
  assert.match(
    text,
    /^users_pipeline_http_request_duration_seconds_count\{service="server",replica="server-7",method="POST",route="\/users",status="202"\} 1$/m,
  );
});

Deno.test("ApiMetrics counts refused POST /users by reason: full, unavailable, invalid", async () => {
  let failure: Error = new QueueFullError(10);
  const { app, metrics } = meteredApp(() => Promise.reject(failure));
  assert.equal((await app.request("/users", postUser())).status, 503);
  failure = new Error("connect ECONNREFUSED");
  assert.equal((await app.request("/users", postUser())).status, 503);
  assert.equal((await app.request("/users", postUser("not json"))).status, 400);
  assert.equal(
    (await app.request("/users", {
      method: "POST",
      body: "{}",
      headers: { "Content-Type": "image/png" },
    }))
      .status,
    415,
  );
  const rejections = "users_pipeline_enqueue_rejections_total";
  assert.equal(await valueOf(metrics, rejections, { reason: "full" }), 1);
  assert.equal(await valueOf(metrics, rejections, { reason: "unavailable" }), 1);
  assert.equal(await valueOf(metrics, rejections, { reason: "invalid" }), 2);
  assert.equal(await valueOf(metrics, "users_pipeline_users_accepted_total"), 0);
});

Deno.test("rejectionOf() tells a full queue from an unavailable one and calls any 4xx invalid", () => {
  const full = new ApiError("queue_full", { message: "full", cause: new QueueFullError(1) });
  assert.equal(rejectionOf(503, full), "full");
  assert.equal(
    rejectionOf(503, new ApiError("queue_unavailable", { message: "down" })),
    "unavailable",
  );
  const unconfirmed = new WriteUnconfirmedError("push", {
    wanted: 1,
    confirmed: 0,
    timeoutMs: 200,
    pushed: 1,
  });
  assert.equal(
    rejectionOf(503, new ApiError("unconfirmed", { message: "unconfirmed", cause: unconfirmed })),
    "unconfirmed",
  );
  assert.equal(
    rejectionOf(413, new ApiError("body_too_large", { message: "too large" })),
    "invalid",
  );
  assert.equal(rejectionOf(405, undefined), "invalid");
  assert.equal(rejectionOf(202, undefined), undefined);
  assert.equal(rejectionOf(500, new Error("bug")), undefined);
});

Deno.test("ApiMetrics counts a replayed Idempotency-Key's 202 as a request but not as a user accepted", async () => {
  const metrics = new ApiMetrics({ replica: "server-7", processMetrics: false });
  const firstIdOf = new Map<string, string>();
  let minted = 0;
  const app = createApp({
    accept: () => Promise.resolve(),
    acceptOnce: {
      newId: () => `0190b6e4-9e43-7c2e-a4f4-${String(++minted).padStart(12, "0")}`,
      accept: (user, key) => {
        if (!firstIdOf.has(key)) firstIdOf.set(key, user.id);
        return Promise.resolve(firstIdOf.get(key)!);
      },
    },
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    newId: () => OTHER_ID,
    metrics,
  });
  const keyed = { ...postUser(), headers: { ...postUser().headers, "Idempotency-Key": "k-1" } };
  for (let i = 0; i < 3; i++) assert.equal((await app.request("/users", keyed)).status, 202);
  assert.equal((await app.request("/users", postUser())).status, 202);
  const requests = "users_pipeline_http_requests_total";
  const posts = { method: "POST", route: "/users", status: "202" };
  assert.equal(await valueOf(metrics, requests, posts), 4);
  assert.equal(await valueOf(metrics, "users_pipeline_users_accepted_total"), 2);
  // Read again after more requests: each request is counted once, whenever the scrapes come.
  assert.equal((await app.request("/users", postUser())).status, 202);
  assert.equal(await valueOf(metrics, requests, posts), 5);
  assert.equal(await valueOf(metrics, requests, posts), 5);
  assert.equal(await valueOf(metrics, "users_pipeline_users_accepted_total"), 3);
});
