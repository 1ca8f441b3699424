import assert from "node:assert/strict";
import type { UserEnvelope } from "@users-pipeline/queue";
import { createApp } from "./app.ts";
import { ApiMetrics } from "./metrics.ts";
import { type RateDecision, type RateLimit, rateLimitHeader } from "./rate_limit.ts";

const KEY = "ada-key-0123456789abcdef0123456789abcdef";
const POLICY = '"users";q=10;w=5';

/**
 * An app whose rate limit allows `allowance` users in all, answering each take after `delayMs`
 * (or failing with `fail`), and what it was asked and accepted.
 */
function limitedApp(
  options: { allowance?: number; fail?: Error; delayMs?: number; keys?: boolean } = {},
) {
  const { allowance = 10, fail, delayMs = 0, keys = false } = options;
  const takes: [string, number][] = [];
  const accepted: UserEnvelope[] = [];
  let left = allowance;
  const rateLimit: RateLimit = {
    policy: POLICY,
    take: async (client, cost) => {
      takes.push([client, cost]);
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      if (fail !== undefined) throw fail;
      const allowed = cost <= left;
      if (allowed) left -= cost;
      return { allowed, remaining: left, resetSeconds: 3, retryAfterSeconds: allowed ? 0 : 2 };
    },
  };
  const metrics = new ApiMetrics({
    replica: "r",
    processMetrics: false,
    clients: keys ? ["ada"] : undefined,
  });
  const app = createApp({
    accept: (user) => Promise.resolve(void accepted.push(user)),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    batch: {
      accept: (users) => Promise.resolve(users.map((user) => void accepted.push(user))),
      acceptOnce: () => Promise.reject(new Error("not called by these tests")),
    },
    acceptTimeoutMs: 200,
    rateLimit,
    metrics,
    clientKeys: keys ? [{ name: "ada", key: KEY }] : undefined,
    newId: () => "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f",
  });
  return { app, takes, accepted };
}

function post(body: string, headers: Record<string, string> = {}) {
  return { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } };
}

const BATCH_OF_4 = JSON.stringify(["Ada", "Lin", "Cy", "Bo"].map((name) => ({ name })));

Deno.test("createApp() with a rate limit takes one per user and answers 429 with Retry-After and RateLimit over it", async () => {
  const { app, takes, accepted } = limitedApp({ allowance: 6 });
  const batch = await app.request("/users/batch", post(BATCH_OF_4));
  assert.equal(batch.status, 202);
  assert.equal(batch.headers.get("RateLimit-Policy"), POLICY);
  assert.equal(batch.headers.get("RateLimit"), '"users";r=2;t=3');
  for (let i = 0; i < 2; i++) {
    assert.equal((await app.request("/users", post('{"name": "Ada"}'))).status, 202);
  }
  const over = await app.request("/users", post('{"name": "Ada"}'));
  assert.equal(over.status, 429);
  assert.equal(over.headers.get("Retry-After"), "2");
  assert.equal(over.headers.get("RateLimit-Policy"), POLICY);
  assert.equal(over.headers.get("RateLimit"), '"users";r=0;t=3');
  const body = await over.json();
  assert.equal(body.code, "rate_limited");
  assert.equal(body.id, undefined, "a 429 names no id: nothing may have been queued");
  const batchOver = await app.request("/users/batch", post(BATCH_OF_4));
  assert.equal(batchOver.status, 429);
  assert.equal((await batchOver.json()).code, "rate_limited");
  assert.equal(accepted.length, 6, "a 429 queued nothing");
  // Without keys the client is the caller's address; a direct caller here has none to tell.
  assert.deepEqual(takes, [["unknown", 4], ["unknown", 1], ["unknown", 1], ["unknown", 1], [
    "unknown",
    4,
  ]]);
  const metrics = await (await app.request("/metrics")).text();
  assert.match(
    metrics,
    /^users_pipeline_client_users_total\{client="anonymous",outcome="rate_limited"[^}]*\} 5$/m,
  );
  assert.match(metrics, /^users_pipeline_enqueue_rejections_total\{reason="limited"[^}]*\} 1$/m);
});

Deno.test("createApp() with a rate limit counts each client by its key's name, else by the address Traefik forwards", async () => {
  const keyed = limitedApp({ keys: true });
  await keyed.app.request(
    "/users",
    post('{"name": "Ada"}', { Authorization: `Bearer ${KEY}`, "X-Real-Ip": "10.0.0.9" }),
  );
  assert.deepEqual(keyed.takes, [["ada", 1]]);
  const anonymous = limitedApp();
  for (const address of ["203.0.113.7", "2001:db8::1", "not an address"]) {
    await anonymous.app.request(
      "/users",
      post('{"name": "Ada"}', { "X-Real-Ip": address }),
    );
  }
  assert.deepEqual(anonymous.takes, [["203.0.113.7", 1], ["2001:db8::1", 1], ["unknown", 1]]);
});

Deno.test("createApp() refuses 503 queue_unavailable, pushing nothing, while the rate limit cannot be read", async () => {
  const { app, accepted } = limitedApp({ fail: new Error("Connection is closed.") });
  const single = await app.request("/users", post('{"name": "Ada"}'));
  assert.equal(single.status, 503);
  assert.equal(single.headers.get("Retry-After"), "1");
  assert.equal((await single.json()).code, "queue_unavailable");
  const batch = await app.request("/users/batch", post(BATCH_OF_4));
  assert.equal(batch.status, 503);
  const body = await batch.json();
  assert.equal(body.code, "queue_unavailable");
  assert.deepEqual(
    body.items.map((item: { code: string }) => item.code),
    Array(4).fill("queue_unavailable"),
  );
  assert.equal(accepted.length, 0);
});

Deno.test("createApp() pushes nothing once the rate limit took more than half the bound", async () => {
  // 120 ms of a 200 ms bound: a push sent now could run after the answer's 503.
  const { app, accepted } = limitedApp({ delayMs: 120 });
  const started = performance.now();
  const res = await app.request("/users", post('{"name": "Ada"}'));
  assert.equal(res.status, 503);
  assert.equal((await res.json()).code, "queue_unavailable");
  assert.ok(performance.now() - started < 200 + 100, "answered within the bound");
  const batch = await app.request("/users/batch", post(BATCH_OF_4));
  assert.equal(batch.status, 503);
  assert.equal(accepted.length, 0);
});

Deno.test("rateLimitHeader() writes the draft's RateLimit field for the one policy", () => {
  const decision: RateDecision = {
    allowed: true,
    remaining: 7,
    resetSeconds: 2,
    retryAfterSeconds: 0,
  };
  assert.equal(rateLimitHeader(decision), '"users";r=7;t=2');
});
