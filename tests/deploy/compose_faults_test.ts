/**
 * Faults against the containers of a compose project, run for real on the repo's compose.yaml
 * and the Docker engine `./stack test` starts, scaled to 4 APIs and 3 consumers: a restart of
 * every API replica while clients post; consumers and an API SIGKILLed and Redis restarted under
 * k6 load, beside clients that retry with an Idempotency-Key; `docker compose stop` under load,
 * then `down` and `up` again, which drain the users left queued. Each is held to the delivery
 * promise (docs/delivery.md): every 202 stored exactly once, every other answer one a fault in
 * its window explains, in time. The tests share one project and run in file order; once they end
 * the project is taken down with its volumes.
 *
 * Needs `docker` with the compose plugin and an engine answering; without one each test fails and
 * says why (none skips).
 *
 * @module
 */

import assert from "node:assert/strict";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { checkDelivery, deliveryHeld, describeProblems } from "../support/delivery_check.ts";
import { checkAnswers, type Fault, overlaps, QUEUE_UNAVAILABLE } from "../support/answer_check.ts";
import { classify, type Outcome } from "../support/fault_load.ts";
import {
  accounting,
  ANSWER_THROUGH_TRAEFIK_MS,
  ComposeProject,
  ok,
  run,
  upOnce,
} from "../support/compose_project.ts";
import { settleKeyed } from "../support/retrying_client.ts";

const project = new ComposeProject(`upl${Deno.pid}x`, freePort());
/**
 * Scaled out, as an operator runs it under load: each consumer or API crashed has others beside it
 * to carry the load.
 */
const SCALE = ["--scale", "server=4", "--scale", "server-consumer=3"];
const ready = upOnce(project, ["-d", "--build", "--wait", ...SCALE]);
/** What each test printed as its figures, repeated at the end. */
const summary: string[] = [];

function note(line: string): void {
  summary.push(line);
  console.log(line);
}

/**
 * docs/operations.md, "How the containers behave": while Traefik still lists a replica that has
 * just died, a request waits up to its 1 s dial timeout and its retries (about 2.5 s) before
 * another replica answers it; the window is how long Traefik takes to drop it (its Docker provider
 * applies an exit at most every 2 s, its health check runs every second).
 */
const DEAD_REPLICA = { forMs: 3_000, slowerByMs: 3_500 } as const;
/**
 * docs/operations.md, "How the containers behave": after Redis is back, the replicas reconnect (at
 * most a second apart) and Traefik's next 1 s check finds them ready; until then its own 503
 * answers.
 */
const REDIS_BACK_MS = 5_000;
/**
 * docs/operations.md, "How the containers behave": once Docker reports a replica healthy, Traefik's
 * Docker provider applies it at most 2 s later and its own health check runs every second.
 */
const TRAEFIK_SETTLES_MS = 3_000;
/** compose.yaml's stop_grace_period of every service (Traefik, the API, the consumer). */
const STOP_GRACE_MS = 30_000;

/**
 * The names that may be stored although the client was not told 202: docs/api.md, "The rules of
 * POST /users": a 503 `queue_unavailable` can follow a push Redis ran (its reply cut off by a
 * broken connection), so such a user may be stored once. Only inside a fault that explains that
 * answer; every other 503 (Traefik's own, `queue_full`) never pushed and stores nothing.
 */
function mayBeStored(outcomes: readonly Outcome[], faults: readonly Fault[]): string[] {
  return outcomes.filter((o) =>
    o.kind === "rejected" && o.code === QUEUE_UNAVAILABLE &&
    faults.some((f) => f.excuses.includes("unavailable") && overlaps(o, f))
  ).map((o) => o.name);
}

/**
 * What Traefik, the API replicas and Redis logged since `since` (ms since the epoch), for the
 * reader of a failed check: which replica went unready, and why.
 */
async function serviceLogs(since: number): Promise<string> {
  const logs = await project.compose([
    "logs",
    "--timestamps",
    "--since",
    new Date(since).toISOString(),
    "traefik",
    "server",
    "redis",
  ]);
  return `service logs since ${new Date(since).toISOString()}:\n${logs.stdout.slice(-8_000)}`;
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests drive load against containers they crash and stop: the file holds the machine's load
// turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/deploy/compose_faults_test.ts");
// Hooks run last registered first: the project goes down while the file still holds the turn.
Deno.test.afterAll(async () => {
  console.log(`\ncompose faults summary:\n  ${summary.join("\n  ")}`);
  await project.down();
});

Deno.test({
  name:
    "while every API replica restarts, clients get 202 or 503 with Retry-After, never 404, 500 or 502",
  ...options,
  async fn() {
    await ready();
    const outcomes: Outcome[] = [];
    let polling = true;
    const poller = (async () => {
      for (let i = 0; polling; i++) {
        const name = `restart ${i}`;
        const sentAt = Date.now();
        const response = await fetch(`${project.url}/users`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ name }),
        }).catch((error) => error as Error);
        outcomes.push(
          response instanceof Error
            ? {
              name,
              url: project.url,
              kind: "indeterminate",
              detail: response.message,
              sentAt,
              ms: Date.now() - sentAt,
            }
            : await classify(name, project.url, sentAt, response),
        );
        await delay(20);
      }
    })();
    const restartAt = Date.now();
    const restart = ok("restart server", await project.compose(["restart", "server"]));
    // Every replica restarted is "starting" for Docker until its first passing check (3 s apart),
    // and Traefik's Docker provider routes only to healthy ones: its own 503 may answer until the
    // last of them turns healthy and the provider applies it (at most every 2 s), plus Traefik's
    // next 1 s check. docs/operations.md, "How the containers behave": no replica ready, 503 with
    // Retry-After.
    await waitFor("every API replica healthy again", async () => {
      const servers = await project.containers("server");
      return servers.length > 0 && servers.every((c) => c.health === "healthy");
    }, { timeoutMs: 60_000, intervalMs: 200 });
    const readyAt = Date.now() + TRAEFIK_SETTLES_MS;
    // Keep posting past the window, so the answers after it show the stack settled.
    await delay(TRAEFIK_SETTLES_MS + 2_000);
    polling = false;
    await poller;
    // A replica being stopped serves every request it gets until its listener closes, and a
    // refused connection is retried on another (docs/operations.md, "How the containers behave");
    // with every replica stopping at once, Traefik answers its own 503 until one is ready again.
    // Nothing else: no cut connection, no 502, no API refusal.
    const faults: Fault[] = [{
      what: "every API replica restarting",
      from: restartAt,
      to: readyAt,
      excuses: ["no_replica"],
      slowerByMs: DEAD_REPLICA.slowerByMs,
    }];
    await project.waitDrained();
    const report = checkDelivery(outcomes, await project.rows("restart"));
    const answerReport = checkAnswers(outcomes, faults, {
      answerWithinMs: ANSWER_THROUGH_TRAEFIK_MS,
    });
    const counts = new Map<string, number>();
    for (const o of outcomes) {
      const key = `${o.status ?? o.kind}${o.code ? ` ${o.code}` : ""}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    const answers = [...counts].map(([k, n]) => `${n} × ${k}`).join(", ");
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${answers}`);
    if (answerReport.problems.length > 0) console.log(await serviceLogs(restartAt));
    assert.deepEqual(answerReport.problems, [], answers);
    assert.ok(
      (answerReport.explained.get("every API replica restarting") ?? 0) > 0,
      `no request met the moment no replica was ready: ${answers}`,
    );
    note(`restart of every API replica (${restart.ms} ms): ${answers}, every 202 stored once`);
  },
});

Deno.test({
  name: "under k6 load, crashed consumers and an API and a restarted Redis lose nothing accepted",
  ...options,
  async fn() {
    await ready();
    const loadStarted = Date.now();
    const load = project.acceptedLoad("faults", { rate: 250, seconds: 30 });
    // Beside it, clients that retry every non-202 with their Idempotency-Key. The API kill below
    // may cut their connections too: the test, not k6, holds each cut to the kill's window.
    const keyedLoad = project.keyedLoad("faults", { vus: 4, seconds: 30, excuseCut: true });
    await delay(4_000);
    // Consumers crashing changes no answer: the API does not wait for them.
    let crashes = 0;
    for (let round = 0; round < 3; round++) {
      for (const c of await project.containers("server-consumer")) {
        if (c.state !== "running") continue;
        await project.crash(c.id);
        crashes++;
      }
      await delay(3_000);
    }
    const api = (await project.containers("server")).find((c) => c.state === "running");
    assert.ok(api, "no running API replica to crash");
    const apiKilledAt = await project.crash(api.id);
    await delay(4_000);
    // When its process had exited (Docker keeps the time across the restart): until then the
    // dying process still held its connections, and a request Traefik wrote on one was cut.
    const finished = ok(
      "docker inspect",
      await run("docker", ["inspect", "-f", "{{.State.FinishedAt}}", api.id]),
    ).stdout.trim();
    const apiExitedAt = Date.parse(finished.replace(/(\.\d{3})\d*/, "$1"));
    assert.ok(apiExitedAt >= apiKilledAt - 1_000, `the killed API's exit time: ${finished}`);
    const redisFrom = Date.now();
    const redis = ok("restart redis", await project.compose(["restart", "redis"]));
    const faults: Fault[] = [
      // Its requests in flight are cut (Traefik answers 502, indeterminate); new ones are retried.
      {
        what: "an API replica SIGKILLed",
        from: apiKilledAt,
        to: apiKilledAt + DEAD_REPLICA.forMs,
        excuses: ["cut"],
        slowerByMs: DEAD_REPLICA.slowerByMs,
      },
      {
        what: "Redis restarting",
        from: redisFrom,
        to: Date.now() + REDIS_BACK_MS,
        excuses: ["unavailable", "no_replica"],
      },
    ];
    const [outcomes, { users: keyed, tries }] = await Promise.all([load, keyedLoad]);
    const drainMs = await project.waitDrained();
    const rows = await project.rows("faults");
    const keyedProblems = settleKeyed(keyed, await project.rows("keyed faults"));
    // Every answer, the load's and each keyed try's, is held to the same faults and time.
    const answers = [...outcomes, ...tries];
    // docs/delivery.md's table: a cut connection is what a request in hand of a replica that died
    // gets. The SIGKILLed replica held at most the requests in flight, on either replica, from the
    // kill until its process had exited: the bound on answers left indeterminate.
    const inFlightAtKill = answers.filter((o) =>
      o.sentAt <= apiExitedAt && o.sentAt + o.ms >= apiKilledAt
    ).length;
    const answerReport = checkAnswers(answers, faults, {
      answerWithinMs: ANSWER_THROUGH_TRAEFIK_MS,
      maxIndeterminate: inFlightAtKill,
    });
    const keyedMet = tries.filter((o) => o.kind !== "accepted").length;
    const cutAfterKill =
      answers.filter((o) => o.kind === "indeterminate" && o.sentAt > apiKilledAt).length;
    const report = checkDelivery(outcomes, rows, { mayStore: mayBeStored(outcomes, faults) });
    const line = `faults under load (${crashes} consumer crashes, 1 API crash, redis restarted ` +
      `in ${redis.ms} ms): ${accounting(outcomes, rows.length)}, ${report.indeterminateStored} ` +
      `of the indeterminate and ${report.mayStoreStored} of the 503 queue_unavailable stored; ` +
      `explained ${JSON.stringify(Object.fromEntries(answerReport.explained))}; lost ` +
      `${report.lost.length}, duplicated ${report.duplicated.length}, unexpected rows ` +
      `${report.unexpectedRows.length}; drained ${drainMs} ms after the load; keyed clients: ` +
      `${keyed.length} keys 202 after ${tries.length} tries (${keyedMet} not 202), ` +
      `${keyedProblems.length} not stored exactly once; ${inFlightAtKill} requests in flight ` +
      `from the API kill to its exit ${apiExitedAt - apiKilledAt} ms later, ${cutAfterKill} ` +
      "indeterminate sent after the kill";
    note(line);
    if (!deliveryHeld(report)) {
      // Each doubled user's rows, for the cause: when each id was minted and queued, and stored.
      const names = report.duplicated.slice(0, 5).map((name) => `'${name}'`).join(", ");
      const doubled = await project.sql(
        `select name, id, enqueued_at, stored_at from users where name in (${names}) order by name`,
      );
      console.log(`doubled users' rows:\n${doubled.map((row) => row.join(" ")).join("\n")}`);
      console.log(await serviceLogs(loadStarted));
    }
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
    assert.ok(keyed.length > 0, `inconclusive: no keyed user\n${line}`);
    assert.ok(keyedMet > 0, `inconclusive: every keyed try was a 202, none met a fault\n${line}`);
    assert.deepEqual(keyedProblems.slice(0, 5), [], line);
    if (answerReport.problems.length > 0) console.log(await serviceLogs(loadStarted));
    assert.deepEqual(answerReport.problems, [], line);
    assert.ok(
      (answerReport.explained.get("Redis restarting") ?? 0) > 0,
      `inconclusive: no answer saw Redis restart\n${line}`,
    );
    // Every container came back by itself.
    const down = (await project.containers()).filter((c) => c.state !== "running");
    assert.deepEqual(down.map((c) => c.name), []);
  },
});

Deno.test({
  name: "docker compose stop under load ends every service within its grace period, exit 0; " +
    "after down and up the queued users are drained",
  ...options,
  async fn() {
    await ready();
    // A backlog that only the next `up` can drain: consumers stopped first, then load.
    ok("stop server-consumer", await project.compose(["stop", "server-consumer"]));
    // From the host: a request sent once the stack is gone is refused at once, as a user's is.
    const load = project.acceptedLoad("stopped", { rate: 300, seconds: 12, fromHost: true });
    await delay(6_000);
    const backlog = await project.pending();
    const stopFrom = Date.now();
    const stop = ok("stop", await project.compose(["stop"]));
    const outcomes = await load.catch((error) => {
      throw new Error(`k6 failed while the stack stopped: ${error}`);
    });
    // From the stop on, every service is going away: connections cut or refused, Traefik's and
    // the API's 503s. docs/delivery.md, "Shutdown loses nothing": every request is settled within
    // the grace period, so no answer overlapping the stop takes longer, and the window ends with
    // it (the load ends well before). Before the stop, nothing.
    const faults: Fault[] = [{
      what: "docker compose stop",
      from: stopFrom,
      to: stopFrom + STOP_GRACE_MS,
      excuses: ["cut", "unavailable", "no_replica"],
      slowerByMs: STOP_GRACE_MS,
    }];
    const stopped = await project.containers();
    const unclean = stopped.filter((c) => c.state !== "exited" || c.exitCode !== 0);
    assert.deepEqual(unclean.map((c) => `${c.name} ${c.state} ${c.exitCode}`), []);
    // A SIGKILL at the end of the grace period would show as exit 137.
    assert.ok(stop.ms < STOP_GRACE_MS + 5_000, `docker compose stop took ${stop.ms} ms`);
    ok("down (keeping volumes)", await project.down({ volumes: false }));
    const up = ok("up", await project.compose(["up", "-d", "--wait"]));
    const drainMs = await project.waitDrained();
    const rows = await project.rows("stopped");
    const report = checkDelivery(outcomes, rows, { mayStore: mayBeStored(outcomes, faults) });
    // Each request that met the stop may be cut or refused (the stack is going away); no other.
    const metStop = outcomes.filter((o) => overlaps(o, faults[0]!)).length;
    const answerReport = checkAnswers(outcomes, faults, {
      answerWithinMs: ANSWER_THROUGH_TRAEFIK_MS,
      maxIndeterminate: metStop,
    });
    const line = `stop under load: ${stopped.length} containers exited 0 in ${stop.ms} ms with ` +
      `${backlog} users queued; down, up in ${up.ms} ms, drained in ${drainMs} ms: ` +
      `${accounting(outcomes, rows.length)}, ${report.mayStoreStored} of the 503 ` +
      `queue_unavailable stored; lost ${report.lost.length}, duplicated ${report.duplicated.length}`;
    note(line);
    assert.ok(backlog > 0, line);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
    assert.deepEqual(answerReport.problems, [], line);
  },
});
