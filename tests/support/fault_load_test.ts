import assert from "node:assert/strict";
import { ERROR_CODE_HEADER, NO_REPLICA_READY } from "@users-pipeline/server/api_error";
import { classifyBatch, LoadGenerator, type Outcome } from "./fault_load.ts";

const url = "http://127.0.0.1:1";
const names = ["a", "b", "c"];
const retry = { "Retry-After": "1" };
const seen = (outcomes: readonly Outcome[]) =>
  outcomes.map(({ name, kind, status, code, id }) => ({ name, kind, status, code, id }));
const batch = (response: Response) => classifyBatch(names, url, Date.now(), response);

Deno.test("classifyBatch() reads a 202 as every user queued under its item's id", async () => {
  const outcomes = await batch(Response.json({ items: [{ id: "1" }, { id: "2" }, { id: "3" }] }, {
    status: 202,
  }));
  assert.deepEqual(seen(outcomes), [
    { name: "a", kind: "accepted", status: 202, code: undefined, id: "1" },
    { name: "b", kind: "accepted", status: 202, code: undefined, id: "2" },
    { name: "c", kind: "accepted", status: 202, code: undefined, id: "3" },
  ]);
});

Deno.test("classifyBatch() reads a 207 item by item: a queued one as a 202, a refused one as a 503 with its code and id", async () => {
  const items = [
    { id: "1", status: 202 },
    { id: "2", status: 503, code: "queue_unavailable" },
    { id: "3", status: 503, code: "unconfirmed" },
  ];
  const outcomes = await batch(Response.json({ items }, { status: 207, headers: retry }));
  assert.deepEqual(seen(outcomes), [
    { name: "a", kind: "accepted", status: 202, code: undefined, id: "1" },
    { name: "b", kind: "rejected", status: 503, code: "queue_unavailable", id: "2" },
    { name: "c", kind: "rejected", status: 503, code: "unconfirmed", id: "3" },
  ]);
  assert.ok(outcomes.every((outcome) => outcome.retryAfter === "1"));
});

Deno.test("classifyBatch() reads the API's 503 as every user refused with its item's code and id, Traefik's by its header", async () => {
  const items = names.map((_, i) => ({ id: String(i), status: 503, code: "queue_unavailable" }));
  const api = await batch(
    Response.json({ error: "no user of the batch was queued", code: "queue_unavailable", items }, {
      status: 503,
      headers: retry,
    }),
  );
  assert.deepEqual(
    seen(api).map(({ kind, code, id }) => `${kind} ${code} ${id}`),
    [
      "rejected queue_unavailable 0",
      "rejected queue_unavailable 1",
      "rejected queue_unavailable 2",
    ],
  );
  const traefik = await batch(
    new Response("no available server", {
      status: 503,
      headers: { ...retry, [ERROR_CODE_HEADER]: NO_REPLICA_READY },
    }),
  );
  assert.deepEqual(traefik.map((o) => `${o.name} ${o.kind} ${o.code}`), [
    `a rejected ${NO_REPLICA_READY}`,
    `b rejected ${NO_REPLICA_READY}`,
    `c rejected ${NO_REPLICA_READY}`,
  ]);
});

Deno.test("classifyBatch() holds every user unexpected when the answer breaks the batch's contract", async () => {
  const refused = { id: "2", status: 503, code: "queue_full" };
  const answers = [
    // A 202 missing a user's id, or with an item fewer than the users.
    Response.json({ items: [{ id: "1" }, {}, { id: "3" }] }, { status: 202 }),
    Response.json({ items: [{ id: "1" }, { id: "2" }] }, { status: 202 }),
    // A 202 with a refused item: a partial write reported as success.
    Response.json({ items: [{ id: "1" }, refused, { id: "3" }] }, { status: 202 }),
    // A 207 without Retry-After, and one where every user was queued.
    Response.json({ items: [{ id: "1", status: 202 }, refused, refused] }, { status: 207 }),
    Response.json({ items: names.map((_, i) => ({ id: String(i), status: 202 })) }, {
      status: 207,
      headers: retry,
    }),
    // A 503 with a queued item, a 500.
    Response.json({ error: "x", code: "queue_full", items: [refused, refused, { id: "3" }] }, {
      status: 503,
      headers: retry,
    }),
    Response.json({ error: "internal error", code: "internal_error" }, { status: 500 }),
  ];
  for (const answer of answers) {
    const outcomes = await batch(answer);
    assert.deepEqual(
      outcomes.map((outcome) => `${outcome.name} ${outcome.kind}`),
      ["a unexpected", "b unexpected", "c unexpected"],
      `${answer.status}: ${outcomes[0]!.detail}`,
    );
  }
});

Deno.test("LoadGenerator with batchSize posts batches of unique names and keeps an outcome per user", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const users: { name: string }[] = await request.json();
    assert.equal(new URL(request.url).pathname, "/users/batch");
    return Response.json({ items: users.map(({ name }) => ({ id: `id-of-${name}` })) }, {
      status: 202,
    });
  });
  try {
    const load = new LoadGenerator({
      urls: [`http://127.0.0.1:${server.addr.port}`],
      prefix: "bulk",
      batchSize: 5,
      limit: 4,
      concurrency: 2,
    }).start();
    const outcomes = await load.finished();
    assert.deepEqual(
      outcomes.map((o) => o.name).sort(),
      Array.from({ length: 20 }, (_, i) => `bulk-${i}`).sort(),
    );
    assert.ok(outcomes.every((o) => o.kind === "accepted" && o.id === `id-of-${o.name}`));
  } finally {
    await server.shutdown();
  }
});
