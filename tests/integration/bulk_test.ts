/**
 * `POST /users/batch` through Traefik, against real API replicas, Redis, consumers and
 * PostgreSQL (the native stack): every answer of the contract with the rows it leaves, checked by
 * id — 202 in order, the precise 4xx that queues nothing, 207 when one shard is full with its
 * refused items settled by `GET /users/{id}`, 503 when every shard is, and a keyed batch retried
 * (same ids, each user stored once) standalone and with QUEUE_SHARDS=3.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { queueShards, shardOf } from "@users-pipeline/queue";
import { startTestStack, type TestStack, withStackOutput } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";

interface Answer {
  status: number;
  headers: Headers;
  // deno-lint-ignore no-explicit-any
  body: any;
}

/** POSTs `body` to the stack's `/users/batch` through Traefik. */
async function postBatch(
  stack: TestStack["stack"],
  body: BodyInit,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(`${stack.url}/users/batch`, {
    method: "POST",
    body,
    headers,
    ...(body instanceof ReadableStream ? { duplex: "half" } : {}),
  } as RequestInit);
  return { status: res.status, headers: res.headers, body: await res.json() };
}

const names = (count: number, prefix: string) =>
  Array.from({ length: count }, (_, i) => `${prefix} ${i}`);

const asJson = (list: readonly string[]) => JSON.stringify(list.map((name) => ({ name })));

/** What the stack's Redis and PostgreSQL hold: the queue's depth, the table's rows by id. */
function stores(test: TestStack, shards: number) {
  const redis = new Redis(test.stack.env.REDIS_URL!);
  const sql = connectPostgres(test.stack.env, 1);
  const keys = queueShards(test.stack.env.QUEUE_NAME!, { shards });
  return {
    redis,
    keys,
    /** Every item in the queue's main lists, and the users table's row count. */
    async totals(): Promise<{ queued: number; rows: number }> {
      const lengths = await Promise.all(keys.map((shard) => redis.llen(shard.queue)));
      const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
      return { queued: lengths.reduce((a, b) => a + b, 0), rows: row!.count };
    },
    /** The stored names of `ids`, in their order ("" for an id without a row), once all are. */
    async storedNames(ids: readonly string[]): Promise<string[]> {
      let rows: { id: string; name: string }[] = [];
      await waitFor(
        () => `${ids.length} rows, found ${rows.length}`,
        async () => {
          rows = await sql<{ id: string; name: string }[]>`
            select id::text, name from users where id = any(${ids}::uuid[])`;
          return rows.length === new Set(ids).size;
        },
        { timeoutMs: 20_000 },
      );
      const byId = new Map(rows.map((row) => [row.id, row.name]));
      return ids.map((id) => byId.get(id) ?? "");
    },
    async close() {
      redis.disconnect();
      await sql.end();
    },
  };
}

/** `GET /users/{id}` for each id, 50 at a time: the status, or 404. */
async function statuses(stack: TestStack["stack"], ids: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for (let i = 0; i < ids.length; i += 50) {
    found.push(
      ...await Promise.all(
        ids.slice(i, i + 50).map(async (id) => {
          const res = await fetch(`${stack.url}/users/${id}`);
          const body = await res.json();
          return res.status === 404 ? "404" : body.status;
        }),
      ),
    );
  }
  return found;
}

/** Each shard's share of QUEUE_MAX_LENGTH in the sharded test: room for many batches of 1,000. */
const SHARE = 100_000;

/** Pushes `count` course items (`{"name": …}`) onto `list`, as a full backlog would hold. */
async function fill(redis: Redis, list: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 10_000) {
    const items = names(Math.min(10_000, count - i), "filler").map((name) =>
      JSON.stringify({ name })
    );
    await redis.lpush(list, ...items);
  }
}

/** A body of `bytes` bytes in chunks of 64 KiB, sent chunked (no Content-Length). */
function chunkedBody(bytes: number): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent >= bytes) return controller.close();
      const piece = new Uint8Array(Math.min(65_536, bytes - sent)).fill(0x20);
      sent += piece.length;
      controller.enqueue(piece);
    },
  });
}

Deno.test("POST /users/batch queues a batch whole and stores each user once by id, refuses bad input with a precise 4xx that queues nothing, and replays a keyed batch", async () => {
  await using test = await startTestStack({ servers: 1, consumers: 1 });
  const { stack } = test;
  const store = stores(test, 1);
  try {
    await withStackOutput(test, async () => {
      // 202: ids in the request's order, each stored under its (trimmed) name.
      const batch = names(100, "bulk");
      const accepted = await postBatch(stack, asJson(batch.map((name) => ` ${name} `)));
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      const ids = accepted.body.items.map((item: { id: string }) => item.id);
      assert.equal(new Set(ids).size, 100);
      assert.deepEqual(await store.storedNames(ids), batch);

      // NDJSON, with a final newline.
      const lines = names(3, "ndjson").map((name) => JSON.stringify({ name })).join("\n") + "\n";
      const streamed = await postBatch(stack, lines, { "Content-Type": "application/x-ndjson" });
      assert.equal(streamed.status, 202, JSON.stringify(streamed.body));
      assert.deepEqual(
        await store.storedNames(streamed.body.items.map((item: { id: string }) => item.id)),
        names(3, "ndjson"),
      );

      // Bad input: a precise 4xx and no row, nothing queued.
      await waitFor("the queue drained", async () => (await store.totals()).queued === 0);
      const before = await store.totals();
      const ndjson = { "Content-Type": "application/x-ndjson" };
      const twoMiB = 2 * 1024 * 1024;
      const cases: [
        string,
        () => Promise<Answer>,
        number,
        string,
        (body: Answer["body"]) => void,
      ][] = [
        [
          "mixed valid and invalid items",
          () =>
            postBatch(
              stack,
              '[{"name":"ok"},{"name":"  "},{"name":"ok","role":"x"},{"name":"ok"}]',
            ),
          422,
          "invalid_items",
          (body) =>
            assert.deepEqual(
              body.items.map((i: { index: number; code: string }) => [i.index, i.code]),
              [
                [1, "invalid_name"],
                [2, "invalid_body"],
              ],
            ),
        ],
        [
          "every item invalid",
          () => postBatch(stack, '[7, {"name": 1}, {}]'),
          422,
          "invalid_items",
          (body) => assert.deepEqual(body.items.map((i: { index: number }) => i.index), [0, 1, 2]),
        ],
        ["an empty batch", () => postBatch(stack, "[]"), 422, "empty_batch", () => {}],
        [
          "an object, not an array",
          () => postBatch(stack, '{"name":"x"}'),
          400,
          "invalid_batch",
          () => {},
        ],
        [
          "1001 items",
          () => postBatch(stack, asJson(names(1001, "x"))),
          413,
          "too_many_items",
          () => {},
        ],
        [
          "2 MiB with a Content-Length",
          () => postBatch(stack, " ".repeat(twoMiB)),
          413,
          "body_too_large",
          () => {},
        ],
        [
          "2 MiB chunked",
          () => postBatch(stack, chunkedBody(twoMiB)),
          413,
          "body_too_large",
          () => {},
        ],
        [
          "NDJSON with a blank line",
          () => postBatch(stack, '{"name":"a"}\n\n{"name":"b"}\n', ndjson),
          400,
          "invalid_ndjson",
          (body) => assert.equal(body.line, 2),
        ],
        [
          "NDJSON with a broken line",
          () => postBatch(stack, '{"name":"a"}\n{"name":"b"}\n{"name":\n', ndjson),
          400,
          "invalid_ndjson",
          (body) => assert.equal(body.line, 3),
        ],
        [
          "bytes that are not UTF-8",
          () => postBatch(stack, new Uint8Array([0x5b, 0x7b, 0x22, 0xc3, 0x28, 0x7d, 0x5d])),
          400,
          "invalid_utf8",
          () => {},
        ],
      ];
      for (const [what, send, status, code, check] of cases) {
        const answer = await send();
        assert.equal(answer.status, status, `${what}: ${JSON.stringify(answer.body)}`);
        assert.equal(answer.body.code, code, what);
        check(answer.body);
      }
      assert.deepEqual(await store.totals(), before, "no bad batch queued or stored anything");

      // A keyed batch: its retry answers the same ids, queues nothing, and each user is stored once.
      const key = { "Idempotency-Key": crypto.randomUUID() };
      const keyed = names(50, "keyed");
      const first = await postBatch(stack, asJson(keyed), key);
      assert.equal(first.status, 202, JSON.stringify(first.body));
      const again = await postBatch(stack, asJson(keyed), key);
      assert.equal(again.status, 202);
      assert.equal(again.headers.get("Idempotent-Replayed"), "true");
      assert.deepEqual(again.body, first.body, "the same ids, in the same order");
      const keyedIds = first.body.items.map((item: { id: string }) => item.id);
      assert.deepEqual(await store.storedNames(keyedIds), keyed);
      const other = await postBatch(stack, asJson(names(50, "other")), key);
      assert.equal(other.status, 422);
      assert.equal(other.body.code, "idempotency_key_reused");
      await waitFor("the queue drained", async () => (await store.totals()).queued === 0);
      assert.equal((await store.totals()).rows, before.rows + 50, "each keyed user stored once");
    });
  } finally {
    await store.close();
  }
});

Deno.test("POST /users/batch with QUEUE_SHARDS=2 and one shard at its share answers 207, its refused items settled by id; with both full, 503 with every id", async () => {
  // No consumer: the lists keep what they hold, so each shard's bound is the test's to set.
  await using test = await startTestStack({
    servers: 1,
    consumers: 0,
    env: { QUEUE_SHARDS: "2", QUEUE_MAX_LENGTH: String(2 * SHARE) },
  });
  const { stack } = test;
  const store = stores(test, 2);
  try {
    await withStackOutput(test, async () => {
      await fill(store.redis, store.keys[0]!.queue, SHARE);
      // A user's shard is its id's millisecond, so a batch's ids span both shards only when
      // their minting crosses one: batches of 1,000 are sent until one does. Each answer is then
      // all of a shard's items or none: 202 (all in shard 1), 503 (all in the full shard 0).
      let answer: Answer | undefined;
      for (let i = 0; i < 40 && answer?.status !== 207; i++) {
        answer = await postBatch(stack, asJson(names(1_000, `try ${i}`)));
        assert.ok([202, 207, 503].includes(answer.status), JSON.stringify(answer.body));
      }
      assert.equal(answer!.status, 207, "no batch of 40 spanned both shards");
      assert.equal(answer!.headers.get("Retry-After"), "1");
      const items: { id: string; status: number; code?: string }[] = answer!.body.items;
      const refused = items.filter((item) => item.status === 503);
      const queued = items.filter((item) => item.status === 202);
      // docs/delivery.md: "503 `queue_full`" queued "no" user: the full shard's, all of them.
      assert.ok(refused.every((item) => item.code === "queue_full"), JSON.stringify(refused[0]));
      assert.deepEqual(
        items.map((item) => item.status),
        items.map((item) => shardOf(item.id, 2) === 0 ? 503 : 202),
        "every item of the full shard refused, every other one queued",
      );
      assert.equal(await store.redis.llen(store.keys[0]!.queue), SHARE, "nothing pushed to it");
      // Settled as a single 503 is: 404 (never queued) for the refused, queued for the others.
      assert.deepEqual(
        await statuses(stack, refused.map((item) => item.id)),
        refused.map(() => "404"),
      );
      assert.deepEqual(
        await statuses(stack, queued.map((item) => item.id)),
        queued.map(() => "queued"),
      );

      // Both shards at their share: 503 with every item's id, none queued.
      await fill(
        store.redis,
        store.keys[1]!.queue,
        SHARE - await store.redis.llen(store.keys[1]!.queue),
      );
      const full = await postBatch(stack, asJson(names(5, "refused")));
      assert.equal(full.status, 503, JSON.stringify(full.body));
      assert.equal(full.body.code, "queue_full");
      assert.equal(full.body.items.length, 5);
      assert.deepEqual(
        await statuses(stack, full.body.items.map((item: { id: string }) => item.id)),
        ["404", "404", "404", "404", "404"],
      );
      assert.equal((await store.totals()).queued, 2 * SHARE);
    });
  } finally {
    await store.close();
  }
});

Deno.test("POST /users/batch with QUEUE_SHARDS=3: a batch over every shard is stored by id, and a keyed batch is one shard's, replayed with the same ids and stored once", async () => {
  await using test = await startTestStack({
    servers: 1,
    consumers: 1,
    env: { QUEUE_SHARDS: "3" },
  });
  const { stack } = test;
  const store = stores(test, 3);
  try {
    await withStackOutput(test, async () => {
      const batch = names(300, "sharded");
      const accepted = await postBatch(stack, asJson(batch));
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      const ids = accepted.body.items.map((item: { id: string }) => item.id);
      assert.deepEqual(await store.storedNames(ids), batch);

      const key = { "Idempotency-Key": `sharded-${crypto.randomUUID()}` };
      const keyed = names(40, "keyed");
      const first = await postBatch(stack, asJson(keyed), key);
      assert.equal(first.status, 202, JSON.stringify(first.body));
      const keyedIds: string[] = first.body.items.map((item: { id: string }) => item.id);
      assert.equal(new Set(keyedIds).size, 40, "distinct ids");
      const again = await postBatch(stack, asJson(keyed), key);
      assert.deepEqual(again.body, first.body);
      assert.equal(again.headers.get("Idempotent-Replayed"), "true");
      assert.deepEqual(await store.storedNames(keyedIds), keyed);
      await waitFor("the queue drained", async () => (await store.totals()).queued === 0);
      assert.equal((await store.totals()).rows, 340, "each user stored once");
      const reused = await postBatch(stack, asJson(keyed.toReversed()), key);
      assert.equal(reused.status, 422, "the same names in another order are another batch");
      assert.equal(reused.body.code, "idempotency_key_reused");
    });
  } finally {
    await store.close();
  }
});
