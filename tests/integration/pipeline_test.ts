/**
 * The pipeline against a real Redis and a real PostgreSQL (started on free
 * loopback ports in temp dirs), with the consumer and the API as real
 * processes: enqueue → consume → row in both modes, crash recovery, and
 * idempotent redelivery.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { connectPostgres } from "../support/postgres_client.ts";
import { v7 as uuidv7 } from "uuid";
import { queueKeys, ShardedQueue, type UserEnvelope } from "@users-pipeline/queue";
import { depthOf, enqueueAll } from "@users-pipeline/harness/queue_fill";
import { TaskProcess } from "@users-pipeline/harness/processes";
import { freePort } from "@users-pipeline/harness/ports";
import { waitFor, waitForHttp } from "@users-pipeline/harness/wait";
import { migrate, startPostgres, startRedis } from "@users-pipeline/harness/services";

Deno.test("the pipeline against a real Redis and PostgreSQL", async (t) => {
  // One Redis and one PostgreSQL for the whole file; each step uses its own
  // queue name and truncates the table.
  await using redisServer = await startRedis();
  await using pgServer = await startPostgres();
  await migrate(pgServer.env);
  const sql = connectPostgres(pgServer.env, 2);
  const redis = new Redis(redisServer.url);

  try {
    let queueCounter = 0;
    /** A fresh queue name and an empty table for each test. */
    const freshQueue = async () => {
      await sql`truncate users`;
      const name = `pipeline${++queueCounter}`;
      return { name, queue: new ShardedQueue(redis, { keys: [queueKeys(name)] }) };
    };

    const envFor = (
      queueName: string,
      extra: Record<string, string> = {},
    ): Record<string, string> => {
      return {
        ...Deno.env.toObject(),
        ...pgServer.env,
        REDIS_URL: redisServer.url,
        QUEUE_NAME: queueName,
        // A port of its own for each process's /healthz and /readyz.
        PORT: String(freePort()),
        // Short timings so recovery is observable within a test.
        HEARTBEAT_TTL_MS: "1000",
        RECOVERY_INTERVAL_MS: "200",
        ...extra,
      };
    };

    const users = (count: number, prefix = "user"): UserEnvelope[] => {
      return Array.from({ length: count }, (_, i) => ({
        id: uuidv7(),
        name: `${prefix} ${i}`,
        enqueued_at: Date.now(),
      }));
    };

    const enqueue = async (queue: ShardedQueue, batch: readonly UserEnvelope[]) => {
      for (let i = 0; i < batch.length; i += 500) {
        await enqueueAll(queue, batch.slice(i, i + 500), 10_000_000);
      }
    };

    const storedIds = async (): Promise<string[]> => {
      return (await sql<{ id: string }[]>`select id from users order by id`).map((row) => row.id);
    };

    const rowCount = async (): Promise<number> => {
      const [row] = await sql<{ count: number }[]>`select count(*)::int as count from users`;
      return row?.count ?? 0;
    };

    /** `deno task` reports its script's SIGKILL as exit code 137 (128 + 9). */
    const assertKilled = (status: Deno.CommandStatus, output: readonly string[]) => {
      assert.ok(status.signal === "SIGKILL" || status.code === 137, output.join("\n"));
    };

    const sorted = (batch: readonly UserEnvelope[]): string[] => {
      return batch.map((u) => u.id).sort();
    };

    for (const mode of ["batch", "single"] as const) {
      await t.step(`consumer in ${mode} mode stores every queued user exactly once`, async () => {
        const { name, queue } = await freshQueue();
        const queued = users(mode === "batch" ? 5_000 : 400);
        await enqueue(queue, queued);
        await using consumer = new TaskProcess("consumer", envFor(name, { CONSUMER_MODE: mode }));
        await waitFor("every user stored", async () => (await rowCount()) === queued.length);
        assert.deepEqual(await storedIds(), sorted(queued));
        const row =
          (await sql`select name, enqueued_at, stored_at from users where id = ${queued[7]!.id}`)[
            0
          ]!;
        assert.equal(row.name, "user 7");
        assert.ok(row.stored_at >= row.enqueued_at);
        assert.equal((await consumer.stop()).code, 0);
        assert.deepEqual(await depthOf(redis, queue.keys), {
          queued: 0,
          retry: 0,
          dead: 0,
          processing: 0,
        });
      });
    }

    await t.step("a consumer SIGKILLed between the move and the insert loses nothing", async () => {
      const { name, queue } = await freshQueue();
      const queued = users(3_000);
      await enqueue(queue, queued);
      const crashing = new TaskProcess(
        "crashing-consumer",
        envFor(name, { FAULT_CRASH_AT: "fetched" }),
      );
      assertKilled(await crashing.status, crashing.output);
      // The crashed consumer holds its batch in its processing list.
      const held = await depthOf(redis, queue.keys);
      assert.equal(held.processing, 1_000);
      assert.equal(held.queued, 2_000);
      assert.equal(await rowCount(), 0);

      await using survivor = new TaskProcess("consumer", envFor(name));
      await waitFor("recovery and storage", async () => (await rowCount()) === queued.length);
      assert.deepEqual(await storedIds(), sorted(queued));
      await survivor.stop();
      assert.deepEqual(await depthOf(redis, queue.keys), {
        queued: 0,
        retry: 0,
        dead: 0,
        processing: 0,
      });
    });

    await t.step(
      "redelivery after a crash between commit and acknowledgement makes no duplicate",
      async () => {
        const { name, queue } = await freshQueue();
        const queued = users(1_500);
        await enqueue(queue, queued);
        const crashing = new TaskProcess(
          "crashing-consumer",
          envFor(name, { FAULT_CRASH_AT: "stored" }),
        );
        assertKilled(await crashing.status, crashing.output);
        // The batch is committed but not acknowledged: stored and still held.
        assert.equal(await rowCount(), 1_000);
        assert.equal((await depthOf(redis, queue.keys)).processing, 1_000);

        await using survivor = new TaskProcess("consumer", envFor(name));
        await waitFor("everything drained", async () => {
          const depth = await depthOf(redis, queue.keys);
          return depth.queued + depth.retry + depth.processing === 0;
        });
        await survivor.stop();
        assert.deepEqual(await storedIds(), sorted(queued));
        assert.equal((await depthOf(redis, queue.keys)).dead, 0);
      },
    );

    await t.step(
      "POST /users through the API reaches the table under the id it answered",
      async () => {
        const { name } = await freshQueue();
        const port = freePort();
        const consumerPort = freePort();
        await using server = new TaskProcess("server", envFor(name, { PORT: String(port) }));
        await using consumer = new TaskProcess(
          "consumer",
          envFor(name, { PORT: String(consumerPort) }),
        );
        await waitForHttp(`http://127.0.0.1:${port}/readyz`);
        await waitForHttp(`http://127.0.0.1:${consumerPort}/readyz`);
        // The course's curl: no JSON content type.
        const res = await fetch(`http://127.0.0.1:${port}/users`, {
          method: "POST",
          body: '{"name": "Queueing"}',
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
        });
        assert.equal(res.status, 202);
        const { id } = await res.json();
        assert.equal(res.headers.get("Location"), `/users/${id}`);
        await waitFor("the user to be stored", async () => {
          const lookup = await fetch(`http://127.0.0.1:${port}${res.headers.get("Location")}`);
          assert.equal(lookup.status, 200, "queued or stored: its status from the 202 on");
          return (await lookup.json()).status === "stored";
        });
        const [row] = await sql`select name from users where id = ${id}`;
        assert.equal(row?.name, "Queueing");
        assert.equal((await server.stop()).code, 0);
        assert.equal((await consumer.stop()).code, 0);
      },
    );
  } finally {
    redis.disconnect();
    await sql.end();
  }
});
