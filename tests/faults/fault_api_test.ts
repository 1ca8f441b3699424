/**
 * Fault scenarios of the API (issue #3): a replica SIGKILLed under load,
 * SIGTERM with requests in flight, and a queue at its bound. See
 * `stage.ts` for what every scenario is held to.
 *
 * @module
 */

import assert from "node:assert/strict";
import { delay } from "@users-pipeline/harness/wait";
import { QUEUE_FULL } from "../support/answer_check.ts";
import { killAll, processTree } from "../support/process_roster.ts";
import type { LoadGenerator } from "../support/fault_load.ts";
import { scenario } from "../support/scenario.ts";
import { FAST_ENV } from "../support/service_env.ts";
import {
  answers,
  avg,
  batchesSummary,
  keyedSummary,
  refusals,
  seconds,
  verdict,
} from "../support/summary_phrases.ts";

/** How long a group of pushes may wait behind the call ahead of it (`server/grouped_pushes.ts`). */
const GROUP_WAIT_MS = 5;
/**
 * The bulk client beside the load: batches of 25 users, 10 a second, and its keyed twin, 20 a
 * batch: a modest share of what the 2-core machine sends, enough for kills to catch batches.
 */
const BULK = { batchSize: 25, ratePerSecond: 10, concurrency: 4 };
const KEYED_BULK = { batchSize: 20, ratePerSecond: 10 };

scenario("an API replica SIGKILLed under load: every 202 it gave is stored", async (stage) => {
  const redisServer = stage.world.topology;
  const victim = await stage.server();
  const other = await stage.server();
  await stage.consumer();
  await stage.consumer();
  const load = stage.load([victim, other], "api-kill", { concurrency: 24 });
  const keyed = stage.retrying([victim, other], "api-kill-keyed");
  const bulk = stage.load([victim, other], "api-kill-bulk", BULK);
  const keyedBulk = stage.retrying([victim, other], "api-kill-keyed-bulk", KEYED_BULK);
  const loads = [load, bulk];
  const clients = [keyed, keyedBulk];
  let current = victim;
  let hits = 0;
  let bulkHits = 0;
  let attempts = 0;
  let heldAtKills = 0;
  const restartMs: number[] = [];
  const stalledMs: number[] = [];
  // Each keyed client must meet a kill too (`verifyDelivery` holds it inconclusive otherwise).
  const unmet = () => clients.some((client) => client.answers.every((a) => a.kind === "accepted"));
  while ((hits < 3 || bulkHits < 1 || unmet()) && attempts < 10) {
    attempts++;
    await delay(700);
    // Read the process tree first, so the kill follows the snapshot at once.
    const pids = processTree(current.process.pid);
    // A 200 ms Redis stall holds requests inside the replica (their pushes
    // sent, no reply yet), so the kill surely lands on some: a replica this
    // fast otherwise has answered nearly everything the client still waits for.
    let inFlight: string[] = [];
    let keyedInFlight = 0;
    let killedAt = 0;
    let cut = () => {};
    const frozenAt = Date.now();
    redisServer.server.freeze();
    try {
      await delay(100);
      // Out of the rotation, as a load balancer takes out a replica that is
      // down: only the requests the replica holds can be cut.
      for (const client of [...loads, ...clients]) client.withdraw(victim.url);
      inFlight = loads.flatMap((generator) => generator.inFlightNames(victim.url));
      keyedInFlight = clients.reduce((sum, client) => sum + client.inFlight(victim.url), 0);
      stage.expectEnd(current.process);
      cut = stage.fault("API replica SIGKILLed", ["cut"]);
      killAll(pids, "SIGKILL");
      killedAt = Date.now();
      await delay(100);
    } finally {
      redisServer.server.thaw();
    }
    const stall = Date.now() - frozenAt;
    stalledMs.push(stall);
    // docs/delivery.md, "Every answer is prompt": "a push that reaches a stalled Redis later than
    // half that time does nothing", and its request is answered 503 queue_unavailable. A stall of
    // 0.2 s, under half of REDIS_TIMEOUT_MS, only holds requests, which then get their 202: it
    // refuses one only if this process's timers stretched it past that half (less the wait of a
    // group of pushes, whose deadline counts from its first request).
    if (stall + GROUP_WAIT_MS >= Number(FAST_ENV.REDIS_TIMEOUT_MS) / 2) {
      stage.fault(`${stall} ms Redis stall`, ["unavailable"], { from: frozenAt, graceMs: 0 })();
    }
    await current.process.status;
    current = await stage.server({}, victim.port);
    for (const client of [...loads, ...clients]) client.restore(victim.url);
    cut();
    restartMs.push(Date.now() - killedAt);
    heldAtKills += inFlight.length + keyedInFlight;
    // The kill hit if some request it had was cut off rather than answered.
    const held = new Set(inFlight);
    const cutOff = (generator: LoadGenerator) =>
      generator.outcomes.some((o) => held.has(o.name) && o.kind === "indeterminate");
    if (cutOff(load)) hits++;
    if (cutOff(bulk)) bulkHits++;
  }
  await delay(500);
  // Only requests the killed replicas held may be cut off, the keyed client's among them.
  const { outcomes, drainMs, report } = await stage.settle(loads, {
    maxIndeterminate: heldAtKills,
    keyed: clients,
  });
  assert.ok(hits >= 3, `inconclusive: only ${hits} of ${attempts} kills cut off a request`);
  assert.ok(bulkHits >= 1, `inconclusive: none of ${attempts} kills cut off a batch`);
  await stage.stopAll();
  stage.summary(
    `API SIGKILL: ${answers(report)} [${refusals(outcomes)}], ${hits} SIGKILLs cut requests ` +
      `off (${attempts} sent; ${heldAtKills} requests in flight at the kills, held there by a ` +
      `Redis stall of ${Math.max(...stalledMs)} ms at most), ` +
      `replica back in ${seconds(avg(restartMs))} avg, ${verdict(report)}, drained in ` +
      `${seconds(drainMs)}; ${keyedSummary(keyed)}; ${bulkHits} kills cut a batch off, ` +
      `${batchesSummary(bulk.outcomes, "batches")}, ` +
      batchesSummary(keyedBulk.answers, "keyed batches' tries"),
  );
});

scenario(
  "SIGTERM to the API under load: requests in flight get their 202 and it exits 0",
  async (stage) => {
    const redisServer = stage.world.topology;
    // A 2 s Redis timeout, so a short freeze holds requests in flight without a 503.
    const api = await stage.server({ REDIS_TIMEOUT_MS: "2000" });
    await stage.consumer();
    const load = stage.load([api], "api-sigterm");
    await delay(1_000);
    let inFlight: string[] = [];
    let status: Deno.CommandStatus;
    redisServer.server.freeze();
    try {
      await delay(200);
      // Nothing new is sent to a replica that is stopping, as behind a load
      // balancer: every request it has must still get its answer.
      load.withdraw(api.url);
      inFlight = load.inFlightNames();
      stage.signal(api.process, "SIGTERM");
      const stopping = api.process.status;
      await delay(300);
      redisServer.server.thaw();
      status = await stopping;
    } finally {
      redisServer.server.thaw();
    }
    const { outcomes, drainMs, report } = await stage.settle(load);
    assert.ok(inFlight.length > 0, "inconclusive: no request in flight at SIGTERM");
    assert.equal(status.code, 0, stage.tails());
    const held = outcomes.filter((o) => inFlight.includes(o.name));
    const notAccepted = held.filter((o) => o.kind !== "accepted");
    assert.deepEqual(
      notAccepted.slice(0, 5),
      [],
      "every request in flight at SIGTERM gets its 202",
    );
    await stage.stopAll();
    stage.summary(
      `API SIGTERM: ${held.length} requests in flight (held by a 0.5 s Redis freeze) all ` +
        `answered 202, exit 0; ${answers(report)}, ${verdict(report)}, drained in ` +
        `${seconds(drainMs)}`,
    );
  },
);

scenario(
  "SIGTERM: the API answers every request it receives until its listener closes, then refuses " +
    "connections while it lingers, and exits 0",
  async (stage) => {
    const drainMs = 1_000;
    const api = await stage.server({ SHUTDOWN_DRAIN_MS: String(drainMs) });
    let exited = false;
    const status = api.process.status.then((s) => (exited = true, s));
    const post = (name: string) =>
      fetch(`${api.url}/users`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name }),
      });
    const signalledAt = Date.now();
    stage.signal(api.process, "SIGTERM");
    // The drain: not ready, yet a request is served in full (a 202, never a refusal of its own),
    // on a connection it then closes.
    await delay(200);
    const readyz = await fetch(`${api.url}/readyz`);
    await readyz.body?.cancel();
    assert.equal(readyz.status, 503);
    const during = await post("sigterm drain");
    const body = await during.json();
    assert.equal(during.status, 202, JSON.stringify(body));
    assert.equal(during.headers.get("Connection"), "close");
    // After the drain the port is closed while the process is still there, so a load balancer
    // that still lists it gets its connection refused (which it may retry) rather than no answer.
    await delay(drainMs + 500 - (Date.now() - signalledAt));
    await assert.rejects(
      Deno.connect({ hostname: "127.0.0.1", port: api.port }),
      Deno.errors.ConnectionRefused,
    );
    assert.equal(exited, false, "it exited before lingering with its port closed");
    assert.equal((await status).code, 0, stage.tails());
    const exitMs = Date.now() - signalledAt;
    // The drain, then at least the linger with the port closed (1 s in server/main.ts).
    assert.ok(exitMs >= drainMs + 1_000, `exited ${exitMs} ms after SIGTERM`);
    await stage.stopAll();
    stage.summary(
      `API SIGTERM: 202 during the ${drainMs} ms drain, connection refused after it, exit 0 ` +
        `after ${seconds(exitMs)}`,
    );
  },
);

scenario("a full queue refuses the excess with 503 and loses nothing accepted", async (stage) => {
  const { redis } = stage.world;
  const api = await stage.server({ QUEUE_MAX_LENGTH: "2000" });
  const full = stage.fault("queue at QUEUE_MAX_LENGTH 2000", ["full"], { graceMs: 0 });
  const outcomes = await stage.load([api], "full", { limit: 3_000 }).finished();
  full();
  const refused = outcomes.filter((o) => o.status === 503);
  assert.equal(outcomes.filter((o) => o.kind === "accepted").length, 2_000);
  assert.equal(refused.length, 1_000);
  const reasons = [...new Set(refused.map((o) => `${o.code} (Retry-After ${o.retryAfter})`))];
  assert.deepEqual(reasons, [`${QUEUE_FULL} (Retry-After 1)`]);
  assert.equal(await redis.llen(stage.keys.queue), 2_000);
  const startedAt = Date.now();
  await stage.consumer();
  const drainMs = await stage.drain();
  // Room again: the same API accepts.
  const after = await stage.load([api], "full-after", { limit: 10 }).finished();
  await stage.drain();
  const report = await stage.verify([...outcomes, ...after]);
  assert.equal(report.accepted, 2_010);
  await stage.stopAll();
  stage.summary(
    `queue at its bound (2000, no consumer): 3000 sent, 2000 accepted, 1000 × 503 ` +
      `"${QUEUE_FULL}" with Retry-After, ${verdict(report)}, drained ${seconds(drainMs)} ` +
      `after a consumer started (${seconds(Date.now() - startedAt)}), then 10 of 10 accepted`,
  );
});
