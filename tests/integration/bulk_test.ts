/**
 * `POST /users/batch` through Traefik, against real API replicas, Redis, consumers and
 * PostgreSQL (the native stack): every answer of the contract with the rows it leaves, checked by
 * id — 202 in order, the precise 4xx that queues nothing, 207 when one shard is full with its
 * refused items settled by `GET /users/{id}`, 503 when every shard is, and a keyed batch retried
 * (same ids, each user stored once) standalone and with QUEUE_SHARDS=3; a frozen Redis gives 503
 * queue_unavailable with every id, each never queued. First, the queue's batch
 * pushes against a real Redis: each shard's users all or none, and a keyed batch's record.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import {
  IdempotencyConflictError,
  QueueFullError,
  queueShards,
  ShardedQueue,
  shardOf,
  type UserEnvelope,
  WriteUnconfirmedError,
} from "@users-pipeline/queue";
import {
  REPO_DIR,
  startRedis,
  startTestStack,
  type TestStack,
  withStackOutput,
} from "@users-pipeline/harness/services";
import { delay, waitFor } from "@users-pipeline/harness/wait";
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
    sql,
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

/**
 * Runs each curl example of docs/api.md's `POST /users/batch` section against `url` (for
 * `localhost:8000`), and checks its answer against the comment under it: `# <status> …`, with the
 * `"code"` it names, `Idempotent-Replayed: true` when it says so, and "the same ids" as the
 * answer before.
 */
async function runDocExamples(url: string): Promise<void> {
  const text = await Deno.readTextFile(new URL("../../docs/api.md", import.meta.url));
  const section = text.split(/^## /m).find((part) => part.startsWith("POST /users/batch\n"));
  assert.ok(section, "docs/api.md has a POST /users/batch section");
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);
  const host = new URL(url).host;
  const out = await Deno.makeTempFile();
  let examples = 0;
  let previous = "";
  try {
    for (const block of blocks) {
      let command = "";
      for (const line of block.split("\n")) {
        if (!line.startsWith("# ")) {
          command += `${line}\n`;
          continue;
        }
        const expected = line.slice(2);
        const run = await new Deno.Command("bash", {
          args: [
            "-c",
            `${command.trim().replaceAll("localhost:8000", host)} -s -o ${out} -w '%{http_code}'`,
          ],
          stdout: "piped",
          stderr: "piped",
        }).output();
        const status = new TextDecoder().decode(run.stdout);
        const body = await Deno.readTextFile(out);
        const what = `${command.trim()}\n  expected: ${expected}\n  got ${status}: ${body}`;
        assert.equal(status, expected.slice(0, 3), what);
        const code = /"code":"(\w+)"/.exec(expected)?.[1];
        if (code !== undefined) assert.match(body, new RegExp(`"code":"${code}"`), what);
        if (expected.includes("Idempotent-Replayed: true")) {
          assert.match(body, /^idempotent-replayed: true\r?$/im, what);
        }
        const items = body.slice(body.indexOf("{"));
        if (expected.includes("the same ids")) assert.equal(items, previous, what);
        previous = items;
        command = "";
        examples++;
      }
    }
  } finally {
    await Deno.remove(out);
  }
  assert.ok(examples >= 7, `ran ${examples} examples`);
}

/** `count` users with ids in `shard` of `shards` (a UUIDv7's shard is its millisecond). */
function usersIn(shard: number, shards: number, count: number, prefix: string): UserEnvelope[] {
  return Array.from({ length: count }, (_, i) => {
    const at = 1_800_000_000_000 + shard + shards * i;
    const hex = at.toString(16).padStart(12, "0");
    const id = `${hex.slice(0, 8)}-${hex.slice(8)}-7000-8000-${String(i).padStart(12, "0")}`;
    return { id, name: `${prefix} ${i}`, enqueued_at: at };
  });
}

Deno.test("ShardedQueue.enqueueBatch() pushes each shard's users in one call, all or none: a shard with room for some takes none", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const queue = new ShardedQueue(redis, { keys: queueShards("bulk-whole", { shards: 2 }) });
  try {
    // Shard 0 has room for 2 of its 3 users (share 5, 3 queued); shard 1 room for all.
    await fill(redis, queue.keys[0]!.queue, 3);
    const [a, b] = [usersIn(0, 2, 3, "zero"), usersIn(1, 2, 2, "one")];
    const batch = [a[0]!, b[0]!, a[1]!, b[1]!, a[2]!];
    const outcomes = await queue.enqueueBatch(batch, { maxLength: 10 });
    assert.deepEqual(
      outcomes.map((outcome) => outcome instanceof QueueFullError ? "full" : outcome),
      ["full", undefined, "full", undefined, "full"],
    );
    assert.equal(await redis.llen(queue.keys[0]!.queue), 3, "none of shard 0's users pushed");
    assert.deepEqual(
      await redis.lrange(queue.keys[1]!.queue, 0, -1),
      b.map((user) => JSON.stringify(user)).toReversed(),
      "shard 1's, in order",
    );
    assert.equal(await redis.sismember(queue.keys[0]!.queuedIds, a[0]!.id), 0);
    assert.equal(await queue.indexed(b[1]!.id), "queued");
    // The bound is the shard's: its 2 users fit.
    assert.deepEqual(await queue.enqueueBatch(a.slice(0, 2), { maxLength: 10 }), [
      undefined,
      undefined,
    ]);
  } finally {
    redis.disconnect();
  }
});

Deno.test("ShardedQueue.enqueueBatchOnce() queues a keyed batch in one step with its record: a retry answers its ids and pushes nothing", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  const queue = new ShardedQueue(redis, { keys: queueShards("bulk-once", { shards: 3 }) });
  const confirmed = new ShardedQueue(redis, {
    keys: queueShards("bulk-once", { shards: 3 }),
    waitReplicas: 1,
    waitTimeoutMs: 20,
  });
  const batchFor = (key: string, names: readonly string[]) =>
    names.map((name) => ({ id: queue.idForKey(key), name, enqueued_at: Date.now() }));
  const options = (key: string) => ({ key, maxLength: 30, ttlSeconds: 60 });
  const depth = async () =>
    (await Promise.all(queue.keys.map((keys) => redis.llen(keys.queue)))).reduce((a, b) => a + b);
  try {
    const users = batchFor("k", ["Ada", "Grace", "Lin"]);
    const shard = queue.shardIndexOfKey("k");
    assert.deepEqual(await queue.enqueueBatchOnce(users, options("k")), users.map((u) => u.id));
    assert.equal(await redis.llen(queue.keys[shard]!.queue), 3, "all in the key's shard");
    const retry = batchFor("k", ["Ada", "Grace", "Lin"]);
    assert.deepEqual(await queue.enqueueBatchOnce(retry, options("k")), users.map((u) => u.id));
    assert.equal(await depth(), 3, "the retry pushed nothing");
    await assert.rejects(
      queue.enqueueBatchOnce(batchFor("k", ["Ada", "Grace"]), options("k")),
      (error) => error instanceof IdempotencyConflictError && error.id === users[0]!.id,
    );
    // A single POST /users with the key of a batch is another request: a conflict.
    await assert.rejects(
      queue.enqueueOnce(batchFor("k", ["Ada"])[0]!, options("k")),
      IdempotencyConflictError,
    );
    // A batch of one and a single user share a record: the same request.
    const single = batchFor("s", ["Ada"])[0]!;
    assert.equal(await queue.enqueueOnce(single, options("s")), single.id);
    assert.deepEqual(await queue.enqueueBatchOnce(batchFor("s", ["Ada"]), options("s")), [
      single.id,
    ]);
    // All or none under the key's shard's share (10): 11 users do not fit, and leave no record.
    const many = batchFor("m", Array.from({ length: 11 }, (_, i) => `m${i}`));
    await assert.rejects(queue.enqueueBatchOnce(many, options("m")), QueueFullError);
    assert.equal(
      await redis.exists(queue.keys[queue.shardIndexOfKey("m")]!.idempotencyPrefix + "m"),
      0,
    );
    assert.equal(await depth(), 4);
    // Unconfirmed (no replica to confirm): pushed, and the error names every id, then the
    // retry names the same ids.
    const pending = batchFor("w", ["x", "y"]);
    await assert.rejects(
      confirmed.enqueueBatchOnce(pending, options("w")),
      (error) =>
        error instanceof WriteUnconfirmedError &&
        JSON.stringify(error.queuedAsAll) === JSON.stringify(pending.map((u) => u.id)),
    );
    await assert.rejects(
      confirmed.enqueueBatchOnce(batchFor("w", ["x", "y"]), options("w")),
      (error) =>
        error instanceof WriteUnconfirmedError && error.pushed === 0 &&
        JSON.stringify(error.queuedAsAll) === JSON.stringify(pending.map((u) => u.id)),
    );
    assert.equal(await depth(), 6);
    // An id outside the key's shard is a bug of the caller's.
    const stray = usersIn((queue.shardIndexOfKey("z") + 1) % 3, 3, 1, "stray");
    assert.throws(() => queue.enqueueBatchOnce(stray, options("z")), RangeError);
  } finally {
    redis.disconnect();
  }
});

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

      await runDocExamples(stack.url);

      // Redis frozen: 503 queue_unavailable with every item's id, within REDIS_TIMEOUT_MS and the
      // 100 ms docs/delivery.md, "Every answer is prompt" allows "as their client times it". Its
      // "push that reaches a stalled Redis later than half that time does nothing", so once Redis
      // runs again each id settles as never queued: 404.
      stack.redis!.freeze();
      const started = Date.now();
      let frozen: Answer;
      try {
        frozen = await postBatch(stack, asJson(names(5, "frozen")));
      } finally {
        await delay(600);
        stack.redis!.thaw();
      }
      const tookMs = Date.now() - started;
      assert.equal(frozen.status, 503, JSON.stringify(frozen.body));
      assert.ok(tookMs < 1_000 + 100 + 600, `answered after ${tookMs - 600} ms`);
      assert.equal(frozen.body.code, "queue_unavailable");
      // The replica was unready while Redis was frozen: Traefik routes to it again once it is ready.
      await waitFor("the API ready again through Traefik", async () => {
        const res = await fetch(`${stack.url}/readyz`);
        await res.body?.cancel();
        return res.status === 200;
      });
      assert.deepEqual(frozen.body.items.map((item: { code: string }) => item.code), [
        "queue_unavailable",
        "queue_unavailable",
        "queue_unavailable",
        "queue_unavailable",
        "queue_unavailable",
      ]);
      assert.deepEqual(
        await statuses(stack, frozen.body.items.map((item: { id: string }) => item.id)),
        ["404", "404", "404", "404", "404"],
      );
      const after = await store.totals();
      assert.deepEqual(after, { queued: 0, rows: after.rows }, "nothing queued once Redis ran");
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
      // their minting crosses one: batches of 1,000 are sent until one does. Until then each
      // answer is 202 (all in shard 1) or 503 (all in the full shard 0): docs/api.md, "207": a
      // batch's "shards refused all of their users and the others queued all of theirs".
      let answer: Answer | undefined;
      let tries = 0;
      while (tries < 40 && answer?.status !== 207) {
        answer = await postBatch(stack, asJson(names(1_000, `try ${++tries}`)));
        assert.ok([202, 207, 503].includes(answer.status), JSON.stringify(answer.body));
      }
      assert.equal(answer!.status, 207, "no batch of 40 spanned both shards");
      console.log(`a batch of 1,000 spanned both shards at try ${tries}`);
      assert.equal(answer!.headers.get("Retry-After"), "1");
      const items: { id: string; status: number; code?: string }[] = answer!.body.items;
      const refused = items.filter((item) => item.status === 503);
      const queued = items.filter((item) => item.status === 202);
      // docs/delivery.md, "How the code keeps it": "A 4xx, 503 queue_full and Traefik's own
      // 503 no_replica_ready queued nothing." So each refused item is the full shard's.
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

Deno.test("POST /users/batch with QUEUE_SHARDS=3: a batch is stored by id, bulk-k6.js runs plain and keyed, and a keyed batch is one shard's, replayed with the same ids and stored once", async () => {
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
      const shard = shardOf(keyedIds[0]!, 3);
      assert.ok(keyedIds.every((id) => shardOf(id, 3) === shard), "every id in the key's shard");
      assert.equal(
        await store.redis.exists(store.keys[shard]!.idempotencyPrefix + key["Idempotency-Key"]),
        1,
        "the key's record in the same shard",
      );
      const again = await postBatch(stack, asJson(keyed), key);
      assert.deepEqual(again.body, first.body);
      assert.equal(again.headers.get("Idempotent-Replayed"), "true");
      assert.deepEqual(await store.storedNames(keyedIds), keyed);
      await waitFor("the queue drained", async () => (await store.totals()).queued === 0);
      assert.equal((await store.totals()).rows, 340, "each user stored once");
      const reused = await postBatch(stack, asJson(keyed.toReversed()), key);
      assert.equal(reused.status, 422, "the same names in another order are another batch");
      assert.equal(reused.body.code, "idempotency_key_reused");

      // tests/k6/bulk-k6.js runs as users run it (./stack k6 bulk-k6.js), plain and keyed: every
      // check holds (k6 exits 99 when a threshold fails), and each of its users is one row.
      for (const keyedRun of ["0", "1"]) {
        const k6 = await new Deno.Command("k6", {
          args: ["run", "--quiet", "--no-color", "-e", `BASE_URL=${stack.url}`, "-e", "VUS=2"]
            .concat(["-e", "DURATION=2s", "-e", `KEYED=${keyedRun}`, "tests/k6/bulk-k6.js"]),
          cwd: REPO_DIR,
          stdin: "null",
        }).output();
        const output = new TextDecoder().decode(k6.stdout) + new TextDecoder().decode(k6.stderr);
        assert.equal(k6.code, 0, `bulk-k6.js (KEYED=${keyedRun}) failed:\n${output.slice(-3000)}`);
      }
      await waitFor("the queue drained", async () => (await store.totals()).queued === 0);
      const [counts] = await store.sql<{ rows: number; names: number }[]>`
        select count(*)::int as rows, count(distinct name)::int as names from users`;
      assert.ok(counts!.rows > 340, `k6 stored users: ${counts!.rows} rows`);
      assert.equal(counts!.rows, counts!.names, "each user one row, a keyed batch's too");
    });
  } finally {
    await store.close();
  }
});
