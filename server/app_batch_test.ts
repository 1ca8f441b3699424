import assert from "node:assert/strict";
import {
  IdempotencyConflictError,
  QueueFullError,
  type UserEnvelope,
  WriteUnconfirmedError,
} from "@users-pipeline/queue";
import { createApp } from "./app.ts";
import { ApiMetrics } from "./metrics.ts";

/**
 * An app whose batch queue has two shards, by the parity of a counter in the minted id; `refuse`
 * gives a shard's error (none: queued). What it queued is recorded.
 */
function batchApp(options: { refuse?: (shard: number) => unknown; once?: string[] } = {}) {
  const queued: UserEnvelope[] = [];
  let minted = 0;
  const id = () => `00000000-0000-7000-8000-${String(minted++).padStart(12, "0")}`;
  const shardOf = (user: UserEnvelope) => Number(user.id.slice(-1)) % 2;
  const metrics = new ApiMetrics({ replica: "test", processMetrics: false });
  const app = createApp({
    accept: () => Promise.resolve(),
    acceptOnce: {
      newId: id,
      accept: (user) => Promise.resolve(user.id),
    },
    batch: {
      accept: (users) => {
        const outcomes = users.map((user) => options.refuse?.(shardOf(user)));
        queued.push(...users.filter((_, i) => outcomes[i] === undefined));
        return Promise.resolve(outcomes);
      },
      acceptOnce: (users) => {
        const error = options.refuse?.(0);
        if (error !== undefined) return Promise.reject(error);
        if (options.once !== undefined) return Promise.resolve(options.once);
        queued.push(...users);
        return Promise.resolve(users.map((user) => user.id));
      },
      maxItems: 4,
      bodyLimitBytes: 256,
    },
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    newId: id,
    metrics,
  });
  return { app, queued, metrics };
}

function post(body: BodyInit, headers: Record<string, string> = {}): RequestInit {
  return { method: "POST", body, headers };
}

const THREE = '[{"name":"Ada"},{"name":" Grace "},{"name":"Lin"}]';

async function metric(app: ReturnType<typeof batchApp>["app"], pattern: RegExp): Promise<number> {
  const text = await (await app.request("/metrics")).text();
  return Number(pattern.exec(text)?.[1]);
}

Deno.test("POST /users/batch answers 202 with every id in the request's order and queues the trimmed names", async () => {
  const { app, queued } = batchApp();
  const res = await app.request("/users/batch", post(THREE));
  assert.equal(res.status, 202);
  const { items } = await res.json();
  assert.deepEqual(items.map((item: { id: string }) => item.id), queued.map((user) => user.id));
  assert.deepEqual(queued.map((user) => user.name), ["Ada", "Grace", "Lin"]);
  assert.equal(
    await metric(app, /^users_pipeline_users_accepted_total\{[^}]*\} (\d+)$/m),
    3,
    "users, not requests",
  );
});

Deno.test("POST /users/batch answers 207 with a status per item when one shard refused", async () => {
  const { app, queued } = batchApp({
    refuse: (shard) => shard === 1 ? new QueueFullError(5) : undefined,
  });
  const res = await app.request("/users/batch", post(THREE));
  assert.equal(res.status, 207);
  assert.equal(res.headers.get("Retry-After"), "1");
  const { items } = await res.json();
  assert.deepEqual(
    items.map((item: { status: number; code?: string }) => [item.status, item.code]),
    [
      [202, undefined],
      [503, "queue_full"],
      [202, undefined],
    ],
  );
  assert.deepEqual(queued.map((user) => user.id), [items[0].id, items[2].id]);
  assert.equal(
    await metric(app, /^users_pipeline_batch_users_refused_total\{reason="full"[^}]*\} (\d+)$/m),
    1,
  );
});

Deno.test("POST /users/batch answers 503 with every item's id when every shard refused, under the least settled code", async () => {
  const { app } = batchApp({
    refuse: (shard) =>
      shard === 0 ? new QueueFullError(5) : new WriteUnconfirmedError("push", {
        wanted: 1,
        confirmed: 0,
        timeoutMs: 1,
      }),
  });
  const res = await app.request("/users/batch", post(THREE));
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("Retry-After"), "1");
  const body = await res.json();
  assert.equal(body.code, "unconfirmed");
  assert.deepEqual(body.items.map((item: { code: string }) => item.code), [
    "queue_full",
    "unconfirmed",
    "queue_full",
  ]);
  assert.ok(body.items.every((item: { id?: string }) => typeof item.id === "string"));
});

Deno.test("POST /users/batch refuses the whole batch with 422 listing each invalid item, and queues nothing", async () => {
  const { app, queued } = batchApp();
  const res = await app.request(
    "/users/batch",
    post('[{"name":"Ada"},{"name":""},7,{"name":"Lin","x":1}]'),
  );
  assert.equal(res.status, 422);
  const body = await res.json();
  assert.equal(body.code, "invalid_items");
  assert.deepEqual(
    body.items.map((item: { index: number; code: string }) => [item.index, item.code]),
    [
      [1, "invalid_name"],
      [2, "invalid_body"],
      [3, "invalid_body"],
    ],
  );
  assert.match(body.items[1].message, /item must be a JSON object/);
  const empty = await app.request("/users/batch", post("[]"));
  assert.equal(empty.status, 422);
  assert.equal((await empty.json()).code, "empty_batch");
  assert.equal(queued.length, 0);
});

Deno.test("POST /users/batch answers 400 to NDJSON with a blank line naming it, 413 over its bounds, 415 to another type", async () => {
  const { app, queued } = batchApp();
  const ndjson = { "Content-Type": "application/x-ndjson" };
  const ok = await app.request("/users/batch", post('{"name":"A"}\n{"name":"B"}\n', ndjson));
  assert.equal(ok.status, 202);
  const blank = await app.request("/users/batch", post('{"name":"A"}\n\n{"name":"B"}', ndjson));
  assert.equal(blank.status, 400);
  assert.deepEqual(
    { ...await blank.json(), error: undefined },
    { error: undefined, code: "invalid_ndjson", line: 2 },
  );
  const many = await app.request(
    "/users/batch",
    post(JSON.stringify(Array(5).fill({ name: "A" }))),
  );
  assert.equal(many.status, 413);
  assert.equal((await many.json()).code, "too_many_items");
  const large = await app.request("/users/batch", post(`[{"name":"${"x".repeat(300)}"}]`));
  assert.equal(large.status, 413);
  assert.equal((await large.json()).code, "body_too_large");
  const utf8 = await app.request("/users/batch", post(new Uint8Array([0x5b, 0xff, 0x5d])));
  assert.equal(utf8.status, 400);
  assert.equal((await utf8.json()).code, "invalid_utf8");
  const xml = await app.request("/users/batch", post(THREE, { "Content-Type": "text/xml" }));
  assert.equal(xml.status, 415);
  assert.equal(queued.length, 2, "only the good NDJSON batch");
});

Deno.test("POST /users/batch with Idempotency-Key: a repeat says so and counts no user, another body is 422", async () => {
  const first = batchApp();
  const key = { "Idempotency-Key": "k-1" };
  const res = await first.app.request("/users/batch", post(THREE, key));
  assert.equal(res.status, 202);
  assert.equal(res.headers.get("Idempotent-Replayed"), null);
  const ids = ["00000000-0000-7000-8000-000000000009", "x", "y"];
  const repeat = batchApp({ once: ids });
  const again = await repeat.app.request("/users/batch", post(THREE, key));
  assert.equal(again.status, 202);
  assert.equal(again.headers.get("Idempotent-Replayed"), "true");
  assert.deepEqual((await again.json()).items, ids.map((id) => ({ id })));
  assert.equal(
    await metric(repeat.app, /^users_pipeline_users_accepted_total\{[^}]*\} (\d+)$/m),
    0,
  );
  const full = batchApp({ refuse: () => new QueueFullError(5) });
  const refused = await full.app.request("/users/batch", post(THREE, key));
  assert.equal(refused.status, 503);
  assert.deepEqual((await refused.json()).items.map((item: { code: string }) => item.code), [
    "queue_full",
    "queue_full",
    "queue_full",
  ]);
  assert.equal(
    await metric(
      full.app,
      /^users_pipeline_batch_users_refused_total\{reason="full"[^}]*\} (\d+)$/m,
    ),
    3,
  );
  const conflict = batchApp({ refuse: () => new IdempotencyConflictError("some-id") });
  const reused = await conflict.app.request("/users/batch", post(THREE, key));
  assert.equal(reused.status, 422);
  assert.equal((await reused.json()).code, "idempotency_key_reused");
});
