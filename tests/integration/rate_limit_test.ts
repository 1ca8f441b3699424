/**
 * The rate per client against real services: the limiter's script on a real Redis (a burst, a
 * refusal that takes nothing, the retry time it names), and the whole stack with two API replicas
 * behind Traefik, flooded by one client: the sum of the 202s over both replicas is held to
 * `RATE_LIMIT_BURST + rate × window` from both sides, whatever `X-Real-Ip` the client forges;
 * every answer carries consistent RateLimit fields; a request sent `Retry-After` seconds after a
 * 429 is accepted; every 202 is stored once and no 429 queued anything.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { RateLimiter } from "@users-pipeline/server/rate_limit";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { startRedis, startTestStack, withStackOutput } from "@users-pipeline/harness/services";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { connectPostgres } from "../support/postgres_client.ts";

// A load test: one at a time on the machine (load_turn.ts).
holdLoadTurnForFile("tests/integration/rate_limit_test.ts");

Deno.test("RateLimiter takes a burst, then refuses without taking, naming when the request fits", async () => {
  await using server = await startRedis();
  const redis = new Redis(server.url);
  try {
    // 10 users a second: one every 100 ms; 20 at once.
    const limiter = new RateLimiter(redis, { usersPerSecond: 10, burst: 20, prefix: "rl" });
    assert.equal(limiter.policy, '"users";q=20;w=2');
    const burst = await limiter.take("ada", 15);
    assert.deepEqual(burst, { allowed: true, remaining: 5, resetSeconds: 2, retryAfterSeconds: 0 });
    // More than is left: refused whole, and nothing taken.
    const over = await limiter.take("ada", 6);
    assert.equal(over.allowed, false);
    assert.equal(over.remaining, 5);
    assert.equal(over.retryAfterSeconds, 1, "a user comes back every 100 ms");
    assert.equal((await limiter.take("ada", 5)).remaining, 0);
    // Another client has an allowance of its own.
    assert.equal((await limiter.take("lin", 20)).allowed, true);
    // Empty: a batch of 15 needs 1.5 s, rounded up to whole seconds.
    const empty = await limiter.take("ada", 15);
    assert.equal(empty.allowed, false);
    assert.equal(empty.retryAfterSeconds, 2);
    await delay(empty.retryAfterSeconds * 1_000);
    assert.equal((await limiter.take("ada", 15)).allowed, true, "fits after Retry-After");
    // The key lives only while the allowance is not whole.
    const ttl = await redis.pttl("rl:rate:ada");
    assert.ok(ttl > 0 && ttl <= 2_000, `pttl ${ttl}`);
  } finally {
    redis.disconnect();
  }
});

/** The parameters of a structured field item `"users";k=v;…`, by key. */
function fieldParams(value: string | null): Record<string, number> {
  if (value === null || !value.startsWith('"users";')) {
    assert.fail(`not the "users" policy: ${value}`);
  }
  return Object.fromEntries(
    value.split(";").slice(1).map((param) => {
      const [key, number] = param.split("=");
      assert.match(number ?? "", /^\d+$/, value);
      return [key!, Number(number)];
    }),
  );
}

/** One answer of the flood: when it was sent and came, and what it said. */
interface Answer {
  sent: number;
  came: number;
  status: number;
  retryAfter: number;
  policy: Record<string, number>;
  limit: Record<string, number>;
}

Deno.test("two API replicas behind Traefik hold one client, whatever it forges, to burst + rate × window", async () => {
  const rate = 50;
  const burst = 100;
  await using test = await startTestStack({
    servers: 2,
    consumers: 1,
    env: {
      RATE_LIMIT_USERS_PER_SECOND: String(rate),
      RATE_LIMIT_BURST: String(burst),
      BATCH_MAX_ITEMS: String(burst),
    },
  });
  const { stack } = test;
  const sql = connectPostgres(stack.env, 1);
  try {
    await withStackOutput(test, async () => {
      const answers: Answer[] = [];
      const ids: string[] = [];
      const post = async (forge: boolean) => {
        const sent = performance.now();
        const res = await fetch(`${stack.url}/users`, {
          method: "POST",
          body: '{"name": "Flood"}',
          // Traefik trusts no client's forwarded address: a forged one must not be a new client.
          headers: forge ? { "X-Real-Ip": `10.1.${answers.length % 250}.${ids.length % 250}` } : {},
        });
        const body = await res.json();
        // The one answer besides 202: over its rate a client gets, as docs/api.md, "Rate limits"
        // says, "429 rate_limited, nothing queued", and the count of 202s below bounds them.
        if (res.status === 202) ids.push(body.id);
        else assert.equal(body.code, "rate_limited", JSON.stringify(body));
        answers.push({
          sent,
          came: performance.now(),
          status: res.status,
          retryAfter: Number(res.headers.get("Retry-After") ?? 0),
          policy: fieldParams(res.headers.get("RateLimit-Policy")),
          limit: fieldParams(res.headers.get("RateLimit")),
        });
      };
      // A full bucket to start from: the first answer leaves burst - 1.
      await post(false);
      assert.equal(answers[0]!.limit.r, burst - 1);
      const windowMs = 3_000;
      const until = performance.now() + windowMs;
      await Promise.all(
        Array.from({ length: 8 }, async (_, worker) => {
          while (performance.now() < until) await post(worker % 2 === 1);
        }),
      );
      const accepted = answers.filter((answer) => answer.status === 202).length;
      const refused = answers.length - accepted;
      const firstSent = answers[0]!.sent;
      const firstCame = answers[0]!.came;
      const lastSent = Math.max(...answers.map((answer) => answer.sent));
      const lastCame = Math.max(...answers.map((answer) => answer.came));
      // Redis ran the first request between its sending and its answer, and the last one sent
      // after it was sent and before it came: the allowance it had to give lies between these.
      const most = burst + Math.floor(rate * (lastCame - firstSent) / 1_000) + 1;
      const least = burst + Math.floor(rate * (lastSent - firstCame) / 1_000) - 1;
      console.log(
        `${answers.length} requests in ${Math.round(lastCame - firstSent)} ms: ${accepted} ` +
          `answered 202 (allowed ${least} to ${most}), ${refused} answered 429`,
      );
      assert.ok(refused > accepted, "the client offered far more than its rate");
      assert.ok(accepted <= most && accepted >= least, `${accepted} not in ${least}..${most}`);

      // Every answer's fields: the one policy, and what is left of it, consistent with the status.
      for (const answer of answers) {
        assert.deepEqual(answer.policy, { q: burst, w: Math.ceil(burst / rate) });
        assert.ok(answer.limit.r! >= 0 && answer.limit.r! < burst, JSON.stringify(answer));
        assert.ok(answer.limit.t! <= Math.ceil(burst / rate), JSON.stringify(answer));
        if (answer.status === 429) {
          assert.equal(answer.limit.r, 0, "a refused single user means none was left");
          // One user comes back every 1/rate s: never more than a second, rounded up.
          assert.equal(answer.retryAfter, 1);
        }
      }

      // Both replicas answered, and each counted its share: the sum is what was held to the rate.
      const counted = await Promise.all(stack.ports.api.map(async (port) => {
        const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        const line =
          /^users_pipeline_client_users_total\{client="anonymous",outcome="accepted"[^}]*\} (\d+)$/m
            .exec(text);
        return Number(line?.[1]);
      }));
      assert.ok(counted.every((n) => n > 0), `each replica accepted some: ${counted}`);
      assert.equal(counted[0]! + counted[1]!, accepted);

      // Retry-After is right: drain what is left, then the request after that many seconds fits.
      let last: Answer;
      do {
        await post(false);
        last = answers.at(-1)!;
      } while (last.status === 202);
      await delay(last.retryAfter * 1_000);
      await post(false);
      assert.equal(answers.at(-1)!.status, 202, "accepted after Retry-After");

      // Every 202 is one row; no 429 queued anything (FIFO: it would be stored before the last 202).
      await waitFor(`${ids.length} rows`, async () => {
        const [row] = await sql<{ count: number }[]>`
          select count(*)::int as count from users where id = any(${ids}::uuid[])`;
        return row!.count === ids.length;
      }, { timeoutMs: 20_000 });
      const rows = await sql<{ id: string }[]>`select id::text from users`;
      assert.deepEqual(rows.map((row) => row.id).sort(), [...ids].sort());
    });
  } finally {
    await sql.end();
  }
});
