/**
 * The dead-letter tools against a real Redis: listing with counts, requeue and
 * purge (all, by kind, by id, by record for a letter without an id), an id
 * naming the letter an operator saw while new letters arrive (why the
 * dashboard acts by id, never by place), a requeue
 * interrupted between chunks (nothing duplicated, nothing lost), 100,000
 * letters requeued within 10 s, the overview that reads it all in one step,
 * and `./stack dlq` run as a command.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { v7 as uuidv7 } from "uuid";
import {
  type DeadLetterKind,
  DeadLetters,
  encodeEnvelope,
  queueKeys,
  queueShards,
  readOverview,
  ShardedQueue,
  shardOf,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { enqueueAll } from "@users-pipeline/harness/queue_fill";
import { runCommand } from "@users-pipeline/harness/run_command";
import { startRedis } from "@users-pipeline/harness/services";

const KINDS: readonly DeadLetterKind[] = ["invalid_item", "database_refused", "id_conflict"];

function users(count: number, prefix: string): UserEnvelope[] {
  return Array.from({ length: count }, (_, i) => ({
    id: uuidv7(),
    name: `${prefix} ${i}`,
    enqueued_at: Date.now(),
  }));
}

/**
 * Buries `all` through the real path (enqueue, fetch, acknowledge as dead),
 * 1,000 at a time; the i-th user's kind is `kindOf(i)`.
 */
async function bury(
  queue: ShardedQueue,
  all: readonly UserEnvelope[],
  kindOf: (i: number) => DeadLetterKind,
): Promise<void> {
  await queue.register("burier", 600_000);
  for (let first = 0; first < all.length; first += 1_000) {
    const chunk = all.slice(first, first + 1_000);
    await enqueueAll(queue, chunk, 100_000_000);
    const batch = await queue.fetch({ consumerId: "burier", max: chunk.length });
    assert.ok(batch && batch.items.length === chunk.length);
    await batch.ack({
      deadLetters: chunk.map((user, i) => ({
        payload: encodeEnvelope(user),
        reason: `test ${kindOf(first + i)} ${first + i}`,
        kind: kindOf(first + i),
        id: user.id,
        dead_at: new Date().toISOString(),
      })),
    });
  }
  await queue.handBack("burier");
}

Deno.test("DeadLetters against a real Redis", async (t) => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  let counter = 0;
  const fresh = () => {
    const keys = queueKeys(`dlq${++counter}`);
    return {
      keys,
      queue: new ShardedQueue(redis, { keys: [keys] }),
      letters: new DeadLetters(redis, keys),
    };
  };
  try {
    await t.step(
      "list() pages newest first and counts by kind without reading the list",
      async () => {
        const { queue, letters } = fresh();
        const buried = users(30, "listed");
        await bury(queue, buried, (i) => KINDS[i % 3]!);
        const page = await letters.list(0, 5);
        assert.equal(page.total, 30);
        assert.deepEqual(page.byReason, {
          invalid_item: 10,
          database_refused: 10,
          id_conflict: 10,
        });
        assert.deepEqual(
          page.letters.map((letter) => "id" in letter && letter.id),
          buried.slice(25).reverse().map((u) => u.id),
        );
        const last = await letters.list(28, 5);
        assert.equal(last.letters.length, 2);
        await assert.rejects(letters.list(0, 1_001), RangeError);
      },
    );

    await t.step("requeue() by kind takes only that kind, back to queued", async () => {
      const { keys, queue, letters } = fresh();
      const buried = users(3_500, "kinds");
      await bury(queue, buried, (i) => KINDS[i % 3]!);
      assert.equal(await redis.hget(keys.deadIds, buried[1]!.id).then((s) => s?.[0]), "{");
      assert.equal(await redis.exists(keys.queuedIds), 0, "every one of them left the queued set");
      const requeued = await letters.requeue({ reason: "database_refused" }, { chunk: 500 });
      const refused = buried.filter((_, i) => i % 3 === 1);
      assert.equal(requeued, refused.length);
      assert.equal(await redis.llen(keys.queue), refused.length);
      assert.equal(await redis.llen(keys.dead), buried.length - refused.length);
      // FIFO as they were buried: the oldest is next out of the main list.
      assert.equal(await redis.lindex(keys.queue, -1), encodeEnvelope(refused[0]!));
      assert.equal(await queue.indexed(refused[7]!.id), "queued");
      assert.notEqual(await queue.indexed(buried[0]!.id), "queued");
      assert.deepEqual(await redis.hgetall(keys.deadCounts), {
        invalid_item: String(buried.filter((_, i) => i % 3 === 0).length),
        id_conflict: String(buried.filter((_, i) => i % 3 === 2).length),
      });
    });

    await t.step("requeue() and purge() by id take exactly those letters", async () => {
      const { keys, queue, letters } = fresh();
      const buried = users(2_500, "ids");
      await bury(queue, buried, () => "invalid_item");
      const picked = [buried[3]!, buried[1_200]!, buried[2_499]!];
      assert.equal(await letters.requeue({ ids: picked.map((u) => u.id) }, { chunk: 1_000 }), 3);
      assert.deepEqual(
        (await redis.lrange(keys.queue, 0, -1)).sort(),
        picked.map(encodeEnvelope).sort(),
      );
      assert.equal(await letters.purge({ ids: [buried[5]!.id, uuidv7()] }), 1);
      assert.equal(await queue.indexed(buried[5]!.id), undefined, "a purged user is forgotten");
      assert.equal(await redis.llen(keys.dead), buried.length - 4);
      assert.equal(await redis.hget(keys.deadCounts, "invalid_item"), String(buried.length - 4));
      assert.equal(await letters.purge({ reason: "invalid_item" }), buried.length - 4);
      assert.equal(await redis.exists(keys.dead, keys.deadCounts), 0);
      assert.equal(await redis.scard(keys.queuedIds), 3, "the requeued users are queued again");
      assert.equal(await redis.exists(keys.deadIds), 0, "and nothing else is left");
    });

    await t.step(
      "an id names the letter an operator saw, wherever new letters push it, and only once",
      async () => {
        const { keys, queue, letters } = fresh();
        const first = users(5, "seen");
        await bury(queue, first, () => "id_conflict");
        const seen = (await letters.list(0, 5)).letters[2];
        assert.ok(seen && "id" in seen && seen.id !== undefined);
        // Consumers bury more while the page is open: the third place is another letter now.
        await bury(queue, users(3, "newer"), () => "database_refused");
        const third = (await letters.list(2, 1)).letters[0];
        assert.ok(third && "id" in third && third.id !== seen.id);

        assert.equal(await letters.requeue({ ids: [seen.id] }), 1);
        assert.deepEqual(await redis.lrange(keys.queue, 0, -1), [seen.payload]);
        const left = await letters.list(0, 10);
        assert.equal(left.total, 7);
        assert.ok(left.letters.some((letter) => "id" in letter && letter.id === third.id));
        // A second operator's click on the same, now stale, row takes nothing.
        assert.equal(await letters.requeue({ ids: [seen.id] }), 0);
        assert.equal(await letters.purge({ ids: [seen.id] }), 0);
        assert.equal(await redis.llen(keys.queue), 1);
        assert.equal(await queue.indexed(seen.id), "queued");
      },
    );

    await t.step(
      "a letter without an id is named by the record list() gives it, and that one alone is taken",
      async () => {
        const { keys, queue, letters } = fresh();
        await queue.register("burier", 600_000);
        // Text pushed by hand, never an envelope: the consumer buries it as it is, without an id.
        await redis.lpush(keys.queue, "poison 0", "poison 1", "poison 2");
        const batch = await queue.fetch({ consumerId: "burier", max: 3 });
        assert.deepEqual(batch?.items, ["poison 0", "poison 1", "poison 2"]);
        await batch!.ack({
          deadLetters: batch!.items.map((payload) => ({
            payload,
            reason: "item is not valid JSON",
            kind: "invalid_item" as const,
            dead_at: new Date().toISOString(),
          })),
        });
        await bury(queue, users(2, "beside"), () => "invalid_item");
        const listed = (await letters.list(0, 10)).letters;
        const record = (payload: string) => {
          const letter = listed.find((l) => "payload" in l && l.payload === payload);
          assert.ok(letter && "record" in letter && typeof letter.record === "string", payload);
          return letter.record;
        };
        assert.ok(listed.every((l) => !("id" in l) || !("record" in l)), "an id names the rest");

        assert.equal(await letters.purge({ records: [record("poison 1")] }), 1);
        const left = (await letters.list(0, 10)).letters.map((l) => "payload" in l && l.payload);
        assert.equal(left.length, 4);
        assert.ok(
          !left.includes("poison 1") && left.includes("poison 0") && left.includes("poison 2"),
        );
        assert.equal(await redis.hget(keys.deadCounts, "invalid_item"), "4");
        // Once gone, the same name takes nothing; a record and an id together take both.
        assert.equal(await letters.purge({ records: [record("poison 1")] }), 0);
        const beside = listed.find((l) => "id" in l && l.id !== undefined) as { id: string };
        assert.equal(
          await letters.purge({ records: [record("poison 2")], ids: [beside.id] }),
          2,
        );
        assert.equal(await redis.llen(keys.dead), 2);
      },
    );

    await t.step("a requeue interrupted between chunks duplicates and loses nothing", async () => {
      const { keys, queue, letters } = fresh();
      const buried = users(10_000, "interrupted");
      await bury(queue, buried, (i) => i % 2 === 0 ? "invalid_item" : "id_conflict");
      for (const filter of [{ reason: "id_conflict" }, {}]) {
        const stop = new AbortController();
        await assert.rejects(
          letters.requeue(filter, {
            chunk: 1_000,
            signal: stop.signal,
            onProgress: (_, steps) => steps === 3 && stop.abort(),
          }),
          // The signal's reason: abort() without one makes it a DOMException of this name.
          { name: "AbortError" },
        );
        const dead = (await redis.lrange(keys.dead, 0, -1)).map((r) => JSON.parse(r).payload);
        const queued = await redis.lrange(keys.queue, 0, -1);
        const all = [...dead, ...queued];
        assert.ok(queued.length > 0 && dead.length > 0, `${queued.length} queued, ${dead.length}`);
        assert.equal(all.length, buried.length, "every letter is in exactly one place");
        assert.equal(new Set(all).size, buried.length, "none twice");
        const counts = await redis.hgetall(keys.deadCounts);
        assert.equal(
          Object.values(counts).reduce((sum, n) => sum + Number(n), 0),
          dead.length,
          "the counts follow the list",
        );
      }
      // Run again to the end: finishes the job.
      await letters.requeue({});
      assert.equal(await redis.llen(keys.dead), 0);
      const queued = await redis.lrange(keys.queue, 0, -1);
      assert.equal(new Set(queued).size, buried.length);
      assert.equal(await redis.exists(keys.deadCounts), 0);
    });

    await t.step("requeue() moves 100,000 dead letters within 10 s", async () => {
      const { keys, queue, letters } = fresh();
      const buried = users(100_000, "many");
      await bury(queue, buried, (i) => KINDS[i % 3]!);
      // A crash count left behind for one of them: requeue clears it.
      await redis.hset(keys.deliveries, "unrelated", "1");
      let steps = 0;
      const started = performance.now();
      const requeued = await letters.requeue({}, { onProgress: (_, n) => steps = n });
      const seconds = (performance.now() - started) / 1_000;
      console.log(`requeued ${requeued} dead letters in ${seconds.toFixed(2)} s, ${steps} steps`);
      // docs/operations.md, "Dead letters", says about 2 s: Redis' CPU for 100 steps of 1,000 letters each. Five times
      // that leaves room for a busy 2-core machine (Redis then gets a share of a core), and still
      // fails a step that decodes the whole list rather than its own letters (counting kinds
      // from the list, say, which the counts hash exists to avoid): over 20 s at 100,000.
      assert.ok(
        seconds <= 10,
        `requeued 100,000 dead letters in ${seconds.toFixed(2)} s: over 10 s`,
      );
      assert.equal(requeued, buried.length);
      assert.equal(steps, 100);
      assert.equal(await redis.llen(keys.queue), buried.length);
      assert.equal(await redis.exists(keys.dead, keys.deadCounts), 0);
      assert.equal(await redis.scard(keys.queuedIds), buried.length);
      assert.equal(await redis.exists(keys.deadIds), 0);
      assert.equal(await queue.indexed(buried[99_999]!.id), "queued");
      assert.deepEqual(await redis.hkeys(keys.deliveries), ["unrelated"]);
      await redis.del(keys.queue, keys.queuedIds);
    });

    await t.step(
      "readOverview() shows the depth, the oldest age, consumers and dead letters",
      async () => {
        const { keys, queue } = fresh();
        await bury(queue, users(2, "dead"), () => "id_conflict");
        const queued = users(5, "waiting").map((u, i) => ({ ...u, enqueued_at: 1_000 + i }));
        await enqueueAll(queue, queued, 100);
        await queue.register("alive", 60_000);
        const batch = await queue.fetch({ consumerId: "alive", max: 2 });
        assert.ok(batch);
        await batch.ack({ storedIds: batch.items.map((item) => JSON.parse(item).id) });
        await queue.fetch({ consumerId: "alive", max: 1 });
        const overview = await readOverview(redis, { keys, now: 11_000 });
        assert.deepEqual(overview.depth, { queued: 2, retry: 0, processing: 1, dead: 2 });
        assert.equal(overview.oldest_queued_age_ms, 11_000 - 1_003);
        assert.deepEqual(overview.dead_letters_by_reason, { id_conflict: 2 });
        assert.equal(overview.stored_total, 2);
        assert.equal(overview.consumers.length, 1);
        const [consumer] = overview.consumers;
        assert.equal(consumer?.id, "alive");
        assert.equal(consumer.alive, true);
        assert.equal(consumer.processing, 1);
        assert.equal(consumer.stored, 2);
        await queue.handBack("alive");
        assert.equal(
          await redis.hget(keys.stats, "stored:alive"),
          null,
          "its counter goes with it",
        );
        assert.equal(await redis.hget(keys.stats, "stored"), "2");
      },
    );
  } finally {
    redis.disconnect();
  }
});

/**
 * `./stack dlq <args>` as the script's `dlq)` case runs it: the same deno
 * flags, the queue's name and shards in the environment, the Redis URL first.
 */
function stackDlq(url: string, queueName: string, shards: number, ...args: string[]) {
  return runCommand(Deno.execPath(), [
    "run",
    "--cached-only",
    "--allow-net=127.0.0.1",
    "--allow-env",
    "tools/stack/dlq.ts",
    url,
    ...args,
  ], { env: { QUEUE_NAME: queueName, QUEUE_SHARDS: String(shards) } });
}

/** The last line the command printed, which says how many letters it took. */
function lastLine(output: string): string {
  return output.trimEnd().split("\n").at(-1) ?? "";
}

/** `list`'s output: the header's total and counts, then one letter a line. */
function parseList(stdout: string) {
  const [header = "", ...lines] = stdout.trimEnd().split("\n");
  const match = /^(\d+) dead letters; by reason: (\{.*\})$/.exec(header);
  assert.ok(match, `list's first line: ${header}`);
  return {
    total: Number(match[1]),
    byReason: JSON.parse(match[2]!) as Record<string, number>,
    letters: lines.map((line) => JSON.parse(line) as { id?: string; kind: string; reason: string }),
  };
}

Deno.test("./stack dlq lists, requeues and purges the dead letters of a real Redis", async (t) => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    await t.step("list pages newest first with the counts by kind", async () => {
      const name = "stack_dlq_list";
      const buried = users(12, "listed");
      await bury(
        new ShardedQueue(redis, { keys: [queueKeys(name)] }),
        buried,
        (i) => KINDS[i % 3]!,
      );
      const first = await stackDlq(server.url, name, 1, "list", "--limit", "3");
      assert.equal(first.code, 0, first.stderr);
      const page = parseList(first.stdout);
      assert.equal(page.total, 12);
      assert.deepEqual(page.byReason, { invalid_item: 4, database_refused: 4, id_conflict: 4 });
      assert.deepEqual(
        page.letters.map((l) => [l.id, l.kind, l.reason]),
        [11, 10, 9].map((i) => [buried[i]!.id, KINDS[i % 3], `test ${KINDS[i % 3]} ${i}`]),
      );
      const last = parseList(
        (await stackDlq(server.url, name, 1, "list", "--offset", "10")).stdout,
      );
      assert.deepEqual(last.letters.map((l) => l.id), [buried[1]!.id, buried[0]!.id]);
    });

    await t.step("requeue by kind, by id and then every letter, back to the queue", async () => {
      const name = "stack_dlq_requeue";
      const keys = queueKeys(name);
      const queue = new ShardedQueue(redis, { keys: [keys] });
      const buried = users(9, "requeued");
      await bury(queue, buried, (i) => KINDS[i % 3]!);
      const refused = buried.filter((_, i) => i % 3 === 1);
      const byKind = await stackDlq(server.url, name, 1, "requeue", "--reason", "database_refused");
      assert.equal(byKind.code, 0, byKind.stderr);
      assert.equal(lastLine(byKind.stdout), "3 dead letters requeued");
      assert.deepEqual(
        await redis.lrange(keys.queue, 0, -1),
        refused.map(encodeEnvelope).reverse(),
      );
      assert.equal(await redis.llen(keys.dead), 6);
      assert.equal(await redis.hget(keys.deadCounts, "database_refused"), null);
      assert.equal(await queue.indexed(refused[0]!.id), "queued");

      // Ids are matched whatever their case, as the API's are.
      const byId = await stackDlq(
        server.url,
        name,
        1,
        "requeue",
        "--id",
        buried[0]!.id.toUpperCase(),
      );
      assert.equal(lastLine(byId.stdout), "1 dead letters requeued");
      assert.equal(await redis.lindex(keys.queue, 0), encodeEnvelope(buried[0]!));

      const all = await stackDlq(server.url, name, 1, "requeue");
      assert.equal(lastLine(all.stdout), "5 dead letters requeued");
      assert.equal(await redis.llen(keys.queue), buried.length);
      assert.equal(await redis.exists(keys.dead, keys.deadCounts), 0);
      assert.equal(parseList((await stackDlq(server.url, name, 1, "list")).stdout).total, 0);
    });

    await t.step("purge by id and by kind, --all, and nothing without it", async () => {
      const name = "stack_dlq_purge";
      const keys = queueKeys(name);
      const queue = new ShardedQueue(redis, { keys: [keys] });
      const buried = users(9, "purged");
      await bury(queue, buried, (i) => KINDS[i % 3]!);

      const refusedAll = await stackDlq(server.url, name, 1, "purge");
      assert.equal(refusedAll.code, 2);
      assert.match(refusedAll.stderr, /give --all to purge every dead letter/);
      assert.equal(await redis.llen(keys.dead), 9, "nothing purged");

      const byId = await stackDlq(server.url, name, 1, "purge", "--id", buried[4]!.id);
      assert.equal(lastLine(byId.stdout), "1 dead letters purged");
      assert.equal(await queue.indexed(buried[4]!.id), undefined, "a purged user is forgotten");
      const byKind = await stackDlq(server.url, name, 1, "purge", "--reason", "invalid_item");
      assert.equal(lastLine(byKind.stdout), "3 dead letters purged");
      assert.deepEqual(await redis.hgetall(keys.deadCounts), {
        database_refused: "2",
        id_conflict: "3",
      });
      const all = await stackDlq(server.url, name, 1, "purge", "--all");
      assert.equal(lastLine(all.stdout), "5 dead letters purged");
      assert.equal(await redis.exists(keys.dead, keys.deadCounts, keys.queue), 0);
    });

    await t.step("with QUEUE_SHARDS it lists and requeues every shard's letters", async () => {
      const name = "stack_dlq_shards";
      const shards = queueShards(name, { shards: 2 });
      // Ids a millisecond apart, so that both shards have letters; each user is buried in the
      // shard its id belongs to, as the consumer does.
      const buried = users(10, "sharded").map((u, i) => ({
        ...u,
        id: uuidv7({ msecs: Date.now() + i }),
      }));
      for (const [s, keys] of shards.entries()) {
        const mine = buried.filter((u) => shardOf(u.id, 2) === s);
        assert.ok(mine.length > 0, `shard ${s} has letters`);
        await bury(new ShardedQueue(redis, { keys: [keys] }), mine, () => "id_conflict");
      }
      const list = parseList((await stackDlq(server.url, name, 2, "list")).stdout);
      assert.equal(list.total, 10);
      assert.deepEqual(list.byReason, { id_conflict: 10 });
      const requeued = await stackDlq(server.url, name, 2, "requeue");
      assert.equal(lastLine(requeued.stdout), "10 dead letters requeued");
      for (const [s, keys] of shards.entries()) {
        assert.deepEqual(
          (await redis.lrange(keys.queue, 0, -1)).sort(),
          buried.filter((u) => shardOf(u.id, 2) === s).map(encodeEnvelope).sort(),
          `shard ${s} holds its own users again`,
        );
        assert.equal(await redis.exists(keys.dead), 0);
      }
    });

    await t.step("refuses a first argument that is not a Redis URL", async () => {
      const result = await stackDlq("127.0.0.1:6379", "users", 1, "list");
      assert.equal(result.code, 2);
      assert.match(result.stderr, /the first argument must be the Redis URL\nusage: \.\/stack dlq/);
    });
  } finally {
    redis.disconnect();
  }
});
