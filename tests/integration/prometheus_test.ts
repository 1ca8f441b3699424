/**
 * Prometheus in the native stack, for real: `./stack up`'s Prometheus finds
 * every API replica and consumer from the targets files the supervisor
 * writes, scrapes their `/metrics`, and what it stores agrees with what the
 * pipeline did. Only three metric names are pinned here (the consumers' stored
 * users, the queue's oldest age and its depth); the rest is found by prefix.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startTestStack, withStackOutput } from "@users-pipeline/harness/services";
import {
  OLDEST_QUEUED_AGE,
  query,
  QUEUE_DEPTH,
  STORED_USERS,
  storedSum,
  waitForQuery,
  waitForStored,
  waitForTargets,
} from "../support/prometheus_api.ts";

Deno.test("the native stack's Prometheus scrapes every replica and counts every stored user", async () => {
  await using test = await startTestStack({ servers: 2, consumers: 2, prometheus: true });
  const { stack } = test;
  const url = stack.prometheusUrl;
  assert.ok(url, "the stack runs no Prometheus");
  await withStackOutput(test, async () => {
    const state = JSON.parse(await Deno.readTextFile(`${test.stateDir}/stack.json`));
    assert.equal(state.prometheus.url, url);

    const targetsMs = await waitForTargets(url, { server: 2, "server-consumer": 2 });
    // What the consumers counted before this load (none on a fresh stack, but this test holds
    // the count of its own users, whatever ran before).
    const before = await storedSum(url);

    const posted = 40;
    const answers = await Promise.all(
      Array.from({ length: posted }, (_, i) =>
        fetch(`${stack.url}/users`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ name: `prometheus ${i}` }),
        }).then(async (response) => {
          await response.body?.cancel();
          return response.status;
        })),
    );
    assert.deepEqual(answers, Array(posted).fill(202));
    const storedMs = Date.now();
    assert.equal(await waitForStored(url, posted, { baseline: before }), posted);
    const countedMs = Date.now() - storedMs;
    // Reaching the count mid-load would hide users counted twice: once nothing is queued, in a
    // retry or in a consumer's hands, a scrape after that holds the final count.
    await waitForQuery(
      url,
      `max by (state) (${QUEUE_DEPTH}{state=~"queued|retry|processing"})`,
      (s) => s.length === 3 && s.every((sample) => sample.value === 0),
    );
    assert.equal(await storedSum(url) - before, posted, "the consumers counted each user once");

    // Every replica labels its series with the REPLICA_ID the supervisor gave it.
    const replicas = await query(url, 'group by (replica) ({__name__=~"users_pipeline_.+"})');
    assert.deepEqual(
      replicas.map((sample) => sample.labels.replica).sort(),
      ["consumer-1", "consumer-2", "server-1", "server-2"],
    );
    const perConsumer = await query(url, `sum by (replica) (${STORED_USERS})`);
    assert.ok(perConsumer.every((s) => s.labels.replica?.startsWith("consumer-")));
    await waitForQuery(url, `sum(rate(${STORED_USERS}[20s]))`, ([s]) => (s?.value ?? 0) > 0);
    // Drained, the oldest queued user is no age at all; the gauge is there all the same.
    const [oldest] = await waitForQuery(
      url,
      `max(${OLDEST_QUEUED_AGE}{state="queued"})`,
      (s) => s.length > 0,
    );
    assert.ok(oldest && oldest.value < 10, JSON.stringify(oldest));
    console.log(
      `Prometheus: 4 targets up in ${targetsMs} ms; ${posted} posted, all counted ` +
        `stored ${countedMs} ms later, ${before} counted before (${
          perConsumer.map((s) => `${s.labels.replica} ${s.value}`)
        })`,
    );
  });
  const exit = await stack.stop();
  assert.equal(exit.statuses.prometheus?.code, 0, JSON.stringify(exit.statuses));
  assert.ok(exit.clean, JSON.stringify(exit.statuses));
});
