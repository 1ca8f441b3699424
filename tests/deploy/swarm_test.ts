/**
 * The same compose.yaml on Docker Swarm: a one-node swarm on the engine `./stack test` started,
 * `docker stack deploy -c compose.yaml` (with Traefik's Swarm configuration), then what an
 * operator does: a user posted and stored, `docker service scale`, a rolling update of the API
 * under k6 load with no failed request, and `docker stack rm` with users still queued, which the
 * next deploy drains. Prometheus, deployed from the same file, is checked to scrape every replica
 * after the scale. The tests run in file order on one stack; the last removes the stack, its
 * volumes and the swarm this file made.
 *
 * @module
 */

import assert from "node:assert/strict";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import {
  acceptedK6Args,
  ANSWER_THROUGH_TRAEFIK_MS,
  ComposeProject,
  ok,
  parseAcceptedLines,
  pendingIn,
  run,
  usersAcceptedBy,
} from "../support/compose_project.ts";
import { checkDelivery, deliveryHeld, describeProblems } from "../support/delivery_check.ts";
import { storedSum, waitForStored, waitForTargets } from "../support/prometheus_api.ts";

const STACK = `uplswarm${Deno.pid}`;
const port = freePort();
const url = `http://127.0.0.1:${port}`;
// Builds the images under the names compose.yaml gives them; Swarm runs them from there.
const builder = new ComposeProject(STACK, port);
const prometheusUrl = builder.prometheusUrl;
const summary: string[] = [];
let swarmCreated = false;
let deployFailed: Error | undefined;

function note(line: string): void {
  summary.push(line);
  console.log(line);
}

function requireDeploy(): void {
  if (deployFailed) throw new Error(`the stack was not deployed: ${deployFailed.message}`);
}

/**
 * Settings the deploy's shell exports, as a user's would: Swarm takes any setting from the shell
 * (compose.yaml's x-settings). A secret with no value in project.env, and a bound whose value there
 * (16384) the shell's replaces: both must reach the tasks.
 */
const ADMIN_TOKEN = `swarm-shell-${crypto.randomUUID()}`;
const BODY_LIMIT_BYTES = "1024";

/**
 * `docker stack deploy` of compose.yaml with Traefik's Swarm configuration, our port and the
 * settings above in its environment.
 */
function deploy() {
  return run("docker", ["stack", "deploy", "--detach=true", "-c", "compose.yaml", STACK], {
    env: { ...builder.env, TRAEFIK_CONFIG: "traefik-swarm.yml", ADMIN_TOKEN, BODY_LIMIT_BYTES },
  });
}

/** Running tasks per service of the stack, e.g. {server: 2, "server-consumer": 2, …}. */
async function runningTasks(): Promise<Record<string, number>> {
  const ls = ok(
    "docker stack ps",
    await run("docker", [
      "stack",
      "ps",
      STACK,
      "--filter",
      "desired-state=running",
      "--format",
      "{{.Name}} {{.CurrentState}}",
    ]),
  );
  const counts: Record<string, number> = {};
  for (const line of ls.stdout.split("\n")) {
    const match = line.match(/^\S+?_([a-z0-9-]+)\.\S+ Running/);
    if (match) counts[match[1]!] = (counts[match[1]!] ?? 0) + 1;
  }
  return counts;
}

async function waitForTasks(want: Record<string, number>, timeoutMs = 180_000): Promise<number> {
  let last: Record<string, number> = {};
  return await waitFor(
    () => `tasks ${JSON.stringify(want)} (running: ${JSON.stringify(last)})`,
    async () => {
      last = await runningTasks();
      return Object.entries(want).every(([service, n]) => last[service] === n);
    },
    { timeoutMs, intervalMs: 1_000 },
  );
}

/** The containers of the service's running tasks on this node. */
async function taskContainers(service: string): Promise<string[]> {
  const ps = ok(
    "docker ps",
    await run("docker", [
      "ps",
      "-q",
      "--filter",
      `label=com.docker.swarm.service.name=${STACK}_${service}`,
    ]),
  );
  return ps.stdout.split("\n").filter((id) => id.trim() !== "");
}

/** A container of the service's running task on this node. */
async function taskContainer(service: string): Promise<string> {
  const [id] = await taskContainers(service);
  if (!id) throw new Error(`no running container of ${STACK}_${service}`);
  return id;
}

/** The ids of the stack's containers (`ps -a`), networks or volumes still there. */
async function stackObjects(kind: "container" | "network" | "volume"): Promise<string[]> {
  const ls = ok(
    `docker ${kind} ls`,
    await run("docker", [
      kind,
      "ls",
      "-q",
      ...(kind === "container" ? ["-a"] : []),
      "--filter",
      `label=com.docker.stack.namespace=${STACK}`,
    ]),
  );
  return ls.stdout.split("\n").filter((id) => id.trim() !== "");
}

/** Waits after `docker stack rm` until its containers and, a little later, its network are gone. */
function waitForStackGone(): Promise<number> {
  return waitFor("the stack's containers and network to be gone", async () => {
    return (await stackObjects("container")).length === 0 &&
      (await stackObjects("network")).length === 0;
  }, { timeoutMs: 90_000, intervalMs: 1_000 });
}

async function sql(query: string): Promise<string[][]> {
  const result = ok(
    "psql",
    await run("docker", [
      "exec",
      "-i",
      await taskContainer("database"),
      "sh",
      "-c",
      'psql -v ON_ERROR_STOP=1 -At -F "\t" -U "$POSTGRES_USER" -d "$POSTGRES_DB"',
    ], { stdin: query }),
  );
  return result.stdout.split("\n").filter((l) => l !== "").map((l) => l.split("\t"));
}

async function rows(prefix: string) {
  return (await sql(`select id, name from users where name like '${prefix} %'`))
    .map(([id, name]) => ({ id: id!, name: name! }));
}

async function pending(): Promise<number> {
  const redis = await taskContainer("redis");
  return pendingIn(async (...args) =>
    ok("redis-cli", await run("docker", ["exec", redis, "redis-cli", ...args])).stdout.trim()
  );
}

/** tests/k6/accepted-k6.js from the host's k6 against the published port. */
async function k6Load(prefix: string, rate: number, seconds: number, freshConnections = false) {
  const result = ok(
    "k6",
    await run(
      "k6",
      acceptedK6Args("tests/k6/accepted-k6.js", {
        prefix,
        rate,
        seconds,
        baseUrl: url,
        freshConnections,
      }),
    ),
  );
  return parseAcceptedLines(`${result.stdout}\n${result.stderr}`);
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests start engines, images and containers and drive load: the file holds the machine's
// load turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/deploy/swarm_test.ts");

Deno.test({
  name: "docker stack deploy -c compose.yaml runs the pipeline on a one-node swarm",
  ...options,
  async fn() {
    try {
      const info = ok(
        "docker info",
        await run("docker", ["info", "--format", "{{.Swarm.LocalNodeState}}"]),
      );
      if (info.stdout.trim() !== "active") {
        ok("swarm init", await run("docker", ["swarm", "init", "--advertise-addr", "127.0.0.1"]));
        swarmCreated = true;
      }
      const build = ok("docker compose build", await builder.compose(["build"]));
      const started = Date.now();
      ok("docker stack deploy", await deploy());
      await waitForTasks({
        traefik: 1,
        server: 2,
        "server-consumer": 2,
        redis: 1,
        database: 1,
        prometheus: 1,
      });
      // Every task running means Traefik's passed its health check, which a request routed to a
      // ready API replica passes: the first POST a user sends now must be queued.
      const first = await fetch(`${url}/users`, {
        method: "POST",
        body: JSON.stringify({ name: "swarm first" }),
      });
      const body = await first.text();
      assert.equal(first.status, 202, `the first POST once every task runs: ${body}`);
      note(
        `swarm: images built in ${build.ms} ms; deployed, every task running and the first ` +
          `POST answered 202 in ${Date.now() - started} ms`,
      );
    } catch (error) {
      deployFailed = error as Error;
      throw error;
    }
  },
});

Deno.test({
  name:
    "on Swarm a posted user and a posted batch reach the table, the shell's settings reach the API and /metrics is not public",
  ...options,
  async fn() {
    requireDeploy();
    const status = async (path: string, headers: Record<string, string> = {}) => {
      const response = await fetch(`${url}${path}`, { headers });
      await response.body?.cancel();
      return response.status;
    };
    // Without the shell's token the admin routes would not exist (404, project.env's empty one).
    assert.equal(await status("/admin/overview", { authorization: `Bearer ${ADMIN_TOKEN}` }), 200);
    // Every API task runs with the shell's body limit, not project.env's 16 KiB: 2 KiB is refused.
    const tasks = ok(
      "docker ps",
      await run("docker", [
        "ps",
        "-q",
        "--filter",
        `label=com.docker.swarm.service.name=${STACK}_server`,
      ]),
    ).stdout.split("\n").filter((id) => id !== "");
    assert.ok(tasks.length > 0, "no running API task");
    for (const task of tasks) {
      assert.equal((await builder.containerEnv(task)).BODY_LIMIT_BYTES, BODY_LIMIT_BYTES, task);
    }
    const large = await fetch(`${url}/users`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "swarm large", padding: "x".repeat(2_048) }),
    });
    await large.body?.cancel();
    assert.equal(large.status, 413, "a 2 KiB body under the shell's BODY_LIMIT_BYTES=1024");
    // Prometheus scrapes each task on the overlay network (the targets check below); through
    // Traefik's published port there is no /metrics.
    assert.equal(await status("/metrics"), 404, "GET /metrics through Traefik");
    const response = await fetch(`${url}/users`, {
      method: "POST",
      body: JSON.stringify({ name: "swarm 1" }),
    });
    const body = await response.text();
    assert.equal(response.status, 202, body);
    const { id } = JSON.parse(body);
    await waitFor(
      "the user in the table",
      async () => (await sql(`select count(*) from users where id = '${id}'`))[0]?.[0] === "1",
      {
        timeoutMs: 30_000,
        intervalMs: 300,
      },
    );
    // The batch route on the same stack: one request of three users, a row each under its id.
    const batch = await fetch(`${url}/users/batch`, {
      method: "POST",
      body: JSON.stringify(["a", "b", "c"].map((n) => ({ name: `swarm batch ${n}` }))),
    });
    const batchBody = await batch.text();
    assert.equal(batch.status, 202, batchBody);
    const ids = (JSON.parse(batchBody) as { items: { id: string }[] }).items.map((i) => i.id);
    await waitFor("the batch's users in the table", async () => {
      const stored = await rows("swarm batch");
      return stored.length === 3 &&
        ["a", "b", "c"].every((n, i) =>
          stored.some((row) => row.id === ids[i] && row.name === `swarm batch ${n}`)
        );
    }, { timeoutMs: 30_000, intervalMs: 300 });
    note(
      "swarm: POST /users → 202 → row; POST /users/batch of 3 → 202 → a row per id; the shell's " +
        "ADMIN_TOKEN and BODY_LIMIT_BYTES in force; /metrics → 404",
    );
  },
});

Deno.test({
  name: "docker service scale brings the API to 3 replicas that all serve",
  ...options,
  async fn() {
    requireDeploy();
    ok(
      "service scale",
      await run("docker", ["service", "scale", "--detach=true", `${STACK}_server=3`]),
    );
    const ms = await waitForTasks({ server: 3 });
    const replicas = await taskContainers("server");
    assert.equal(replicas.length, 3, `API containers: ${replicas}`);
    // The same prometheus.yml as under compose: Swarm's DNS answers the service name with every
    // task's address (dnsrr), so the third replica is a target without anything else. Before the
    // load, so the consumers' stored counters read now are its baseline.
    const targetsMs = await waitForTargets(prometheusUrl, { server: 3, "server-consumer": 2 });
    const storedBefore = await storedSum(prometheusUrl);
    const before = await Promise.all(replicas.map(usersAcceptedBy));
    // No fault here: every request is answered 202, by whichever replica Traefik picks.
    const outcomes = await k6Load("scaled", 200, 6);
    const served = (await Promise.all(replicas.map(usersAcceptedBy))).map((n, i) => n - before[i]!);
    await waitFor("the queue to drain", async () => (await pending()) === 0, { timeoutMs: 60_000 });
    const report = checkDelivery(outcomes, await rows("scaled"));
    assert.ok(deliveryHeld(report), describeProblems(report));
    const refused = outcomes.filter((o) => o.kind !== "accepted");
    assert.deepEqual(refused.slice(0, 5).map((o) => `${o.status} ${o.detail ?? ""}`), []);
    const slow = outcomes.filter((o) => o.ms > ANSWER_THROUGH_TRAEFIK_MS).map((o) =>
      `${o.name} ${o.ms} ms`
    );
    assert.deepEqual(
      slow.slice(0, 5),
      [],
      `${slow.length} answers over ${ANSWER_THROUGH_TRAEFIK_MS} ms`,
    );
    // Each replica's own counter: all three answered, and together exactly this load.
    assert.ok(served.every((n) => n > 0), `users accepted per replica: ${served}`);
    assert.equal(served.reduce((a, b) => a + b, 0), report.accepted, `per replica: ${served}`);
    const counted = await waitForStored(prometheusUrl, report.accepted, { baseline: storedBefore });
    assert.equal(counted, report.accepted, "Prometheus counted this load's users once");
    note(
      `swarm: scaled to 3 API replicas in ${ms} ms; ${report.accepted} of ${outcomes.length} ` +
        `accepted and stored, ${
          served.join(", ")
        } by each replica; Prometheus scraped all 5 replicas ` +
        `(${targetsMs} ms) and counted ${counted} users stored`,
    );
  },
});

Deno.test({
  name:
    "a rolling update of the API under k6 load fails no request for want of a replica and loses nothing",
  ...options,
  async fn() {
    requireDeploy();
    const loadSeconds = 70;
    const loadStarted = Date.now();
    // Two clients at once: one on keep-alive connections (as k6 and most HTTP clients), one with a
    // new connection per request (as curl), which a draining replica must not see either.
    const loads = [k6Load("rolling", 100, loadSeconds), k6Load("rollfresh", 50, loadSeconds, true)];
    await delay(2_000);
    const update = ok(
      "service update",
      await run("docker", [
        "service",
        "update",
        "--force",
        "--detach=false",
        "--quiet",
        `${STACK}_server`,
      ]),
    );
    // The check means something only if every replica was replaced under load.
    const updateEnd = Date.now() - loadStarted;
    assert.ok(
      updateEnd < loadSeconds * 1_000 - 1_000,
      `the update ended ${updateEnd} ms into a ${loadSeconds} s load: not all of it was under load`,
    );
    // An update injects no fault: every request of both clients is answered 202.
    const [keepAlive, fresh] = await Promise.all(loads);
    await waitFor("the queue to drain", async () => (await pending()) === 0, { timeoutMs: 60_000 });
    const outcomes = [...keepAlive!, ...fresh!];
    const report = checkDelivery(outcomes, [...await rows("rolling"), ...await rows("rollfresh")]);
    const failed = (list: typeof outcomes) => list.filter((o) => o.kind !== "accepted");
    // Nor a slow answer: docs/operations.md, "How the containers behave": every answer within
    // REDIS_TIMEOUT_MS and half a second more, with no fault to allow more.
    const slow = outcomes.filter((o) => o.ms > ANSWER_THROUGH_TRAEFIK_MS);
    const line = `swarm: rolling update of 3 API replicas in ${update.ms} ms under 150 req/s: ` +
      `keep-alive ${keepAlive!.length - failed(keepAlive!).length} of ${keepAlive!.length} ` +
      `accepted, new connection per request ${fresh!.length - failed(fresh!).length} of ` +
      `${fresh!.length}; slowest answer ${Math.max(...outcomes.map((o) => o.ms))} ms; lost ` +
      `${report.lost.length}, duplicated ${report.duplicated.length}`;
    note(line);
    assert.deepEqual(
      failed(outcomes).slice(0, 5).map((o) => `${o.name}: ${o.status} ${o.detail ?? ""}`),
      [],
      line,
    );
    assert.deepEqual(
      slow.slice(0, 5).map((o) => `${o.name}: ${o.status} in ${o.ms} ms`),
      [],
      `${slow.length} answers slower than ${ANSWER_THROUGH_TRAEFIK_MS} ms; ${line}`,
    );
    assert.ok(deliveryHeld(report), describeProblems(report));
  },
});

Deno.test({
  name: "docker stack rm with users queued loses none: the next deploy drains them",
  ...options,
  async fn() {
    requireDeploy();
    ok(
      "scale consumers to 0",
      await run("docker", ["service", "scale", "--detach=false", `${STACK}_server-consumer=0`]),
    );
    const outcomes = await k6Load("queued", 200, 5);
    const backlog = await pending();
    const rm = ok("stack rm", await run("docker", ["stack", "rm", STACK]));
    await waitForStackGone();
    ok("docker stack deploy", await deploy());
    await waitForTasks({ server: 2, "server-consumer": 2, redis: 1, database: 1 });
    const drainMs = await waitFor("the backlog to drain", async () => (await pending()) === 0, {
      timeoutMs: 120_000,
      intervalMs: 500,
    });
    const report = checkDelivery(outcomes, await rows("queued"));
    const line =
      `swarm: stack rm (${rm.ms} ms) with ${backlog} users queued, redeployed, drained in ` +
      `${drainMs} ms: ${report.accepted} accepted; lost ${report.lost.length}, duplicated ` +
      `${report.duplicated.length}`;
    note(line);
    assert.ok(backlog > 0, line);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
  },
});

Deno.test({
  name: "the swarm test removes its stack, volumes and swarm",
  ...options,
  async fn() {
    await run("docker", ["stack", "rm", STACK]);
    await waitForStackGone();
    const volumes = await stackObjects("volume");
    if (volumes.length > 0) ok("volume rm", await run("docker", ["volume", "rm", ...volumes]));
    if (swarmCreated) ok("swarm leave", await run("docker", ["swarm", "leave", "--force"]));
    const images = ok("compose down", await builder.compose(["down", "--remove-orphans"]));
    note(
      `swarm: removed the stack, ${volumes.length} volumes${
        swarmCreated ? " and the swarm" : ""
      } (${images.ms} ms)`,
    );
    console.log(`\nswarm summary:\n  ${summary.join("\n  ")}`);
  },
});
