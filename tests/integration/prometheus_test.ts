/**
 * Prometheus in the native stack, for real: the harness's Prometheus finds
 * every API replica and consumer from the targets files the supervisor
 * writes, scrapes their `/metrics`, and what it stores agrees with what the
 * pipeline did. Only three metric names are pinned here (the consumers' stored
 * users, the queue's oldest age and its depth); the rest is found by prefix.
 * It also loads the alerting rules of `prometheus/alerts.yml` and evaluates
 * them on the stack's own series without an error, every metric they name
 * being one the replicas export; and an item the consumer buries fires
 * DeadLettersGrowing for its kind.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { parse } from "yaml";
import { queueKeys } from "@users-pipeline/queue";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { projectEnv, startTestStack, withStackOutput } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
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
    const targetsMs = await waitForTargets(url, { server: 2, "server-consumer": 2 });
    const rulesMs = await checkAlertRules(url);
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

    // An item that is no envelope, pushed as the course's LPUSH would: the consumer buries it,
    // and the alert on new dead letters fires for its kind (it waits for no `for`).
    const redis = new Redis(stack.env.REDIS_URL ?? "");
    try {
      await redis.lpush(queueKeys(projectEnv().QUEUE_NAME ?? "users").queue, "not a user");
    } finally {
      redis.disconnect();
    }
    const pushed = Date.now();
    let alerts: { labels: Record<string, string>; state: string }[] = [];
    await waitFor(
      () => `DeadLettersGrowing to fire (alerts: ${JSON.stringify(alerts)})`,
      async () => {
        const response = await fetch(`${url}/api/v1/alerts`, {
          signal: AbortSignal.timeout(2_000),
        });
        alerts = (await response.json()).data.alerts;
        return alerts.some((alert) =>
          alert.labels.alertname === "DeadLettersGrowing" && alert.state === "firing" &&
          alert.labels.reason === "invalid_item"
        );
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    const firingMs = Date.now() - pushed;
    console.log(
      `Prometheus: 4 targets up in ${targetsMs} ms, its rules evaluated ${rulesMs} ms later; ${posted} posted, all counted ` +
        `stored ${countedMs} ms later, ${before} counted before (${
          perConsumer.map((s) => `${s.labels.replica} ${s.value}`)
        }); DeadLettersGrowing fired ${firingMs} ms after a poison item was pushed`,
    );
  });
  const exit = await stack.stop();
  assert.equal(exit.statuses.prometheus?.code, 0, JSON.stringify(exit.statuses));
  assert.ok(exit.clean, JSON.stringify(exit.statuses));
});

/** One rule of `GET /api/v1/rules`. */
interface LoadedRule {
  readonly name: string;
  readonly type: string;
  readonly query: string;
  /** `ok` once evaluated without an error, `err` with `lastError`, `unknown` before. */
  readonly health: string;
  readonly lastError?: string;
  /** An alert's: `inactive`, `pending` or `firing`. */
  readonly state?: string;
}

async function loadedRules(url: string): Promise<LoadedRule[]> {
  const response = await fetch(`${url}/api/v1/rules`, { signal: AbortSignal.timeout(2_000) });
  const body = await response.json();
  assert.equal(body.status, "success", JSON.stringify(body));
  return body.data.groups.flatMap((group: { rules: LoadedRule[] }) => group.rules);
}

/**
 * Prometheus loaded every alert of `prometheus/alerts.yml` from the native
 * configuration's rule_files, evaluates each without an error, and every
 * `users_pipeline_` metric they read is among the series the replicas
 * export (a renamed metric would leave its alert silently unable to fire).
 * With two consumers up and ready, NoConsumerReady and ReplicaDown stay
 * inactive. Resolves with the milliseconds it waited.
 */
async function checkAlertRules(url: string): Promise<number> {
  const file = parse(await Deno.readTextFile(`${REPO_DIR}/prometheus/alerts.yml`));
  const alerts: string[] = file.groups.flatMap((group: { rules: { alert: string }[] }) =>
    group.rules.map((rule) => rule.alert)
  );
  let rules: LoadedRule[] = [];
  const waited = await waitFor(
    () =>
      `every alert evaluated, inactive where the stack is well (last: ${JSON.stringify(rules)})`,
    async () => {
      rules = await loadedRules(url);
      const state = (name: string) => rules.find((rule) => rule.name === name)?.state;
      return rules.length > 0 && rules.every((rule) => rule.health !== "unknown") &&
        state("NoConsumerReady") === "inactive" && state("ReplicaDown") === "inactive";
    },
    { timeoutMs: 20_000, intervalMs: 200 },
  );
  assert.deepEqual(rules.map((rule) => rule.name), alerts);
  for (const rule of rules) {
    assert.equal(rule.type, "alerting", rule.name);
    assert.equal(rule.health, "ok", `${rule.name}: ${rule.lastError}`);
  }
  const named = new Set(rules.flatMap((rule) => rule.query.match(/users_pipeline_\w+/g) ?? []));
  const exported = new Set(
    (await query(url, 'group by (__name__) ({__name__=~"users_pipeline_.+"})'))
      .map((sample) => sample.labels.__name__),
  );
  assert.deepEqual([...named].filter((name) => !exported.has(name)), []);
  return waited;
}
