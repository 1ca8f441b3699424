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
import { freePort } from "../tools/harness/ports.ts";
import { holdLoadTurnForFile } from "../tools/harness/load_turn.ts";
import { delay, waitFor } from "../tools/harness/wait.ts";
import {
  acceptedK6Args,
  ComposeProject,
  ok,
  parseAcceptedLines,
  pendingIn,
  run,
} from "./compose_project.ts";
import { holdTooSlowAsIndeterminate } from "./answer_check.ts";
import { checkDelivery, deliveryHeld, describeProblems } from "./delivery_check.ts";
import { waitForStored, waitForTargets } from "./prometheus_api.ts";

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

/** `docker stack deploy` of compose.yaml with Traefik's Swarm configuration and our port. */
function deploy() {
  return run("docker", ["stack", "deploy", "--detach=true", "-c", "compose.yaml", STACK], {
    env: { ...builder.env, TRAEFIK_CONFIG: "traefik-swarm.yml" },
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

/** A container of the service's running task on this node. */
async function taskContainer(service: string): Promise<string> {
  const ps = ok(
    "docker ps",
    await run("docker", [
      "ps",
      "-q",
      "--filter",
      `label=com.docker.swarm.service.name=${STACK}_${service}`,
    ]),
  );
  const id = ps.stdout.trim().split("\n")[0];
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

async function ready(): Promise<boolean> {
  const response = await fetch(`${url}/readyz`).catch(() => undefined);
  await response?.body?.cancel();
  return response?.status === 200;
}

/** tests/accepted-k6.js from the host's k6 against the published port. */
async function k6Load(prefix: string, rate: number, seconds: number) {
  const result = ok(
    "k6",
    await run(
      "k6",
      acceptedK6Args("tests/accepted-k6.js", { prefix, rate, seconds, baseUrl: url }),
    ),
  );
  return parseAcceptedLines(`${result.stdout}\n${result.stderr}`);
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests start engines, images and containers and drive load: the file holds the machine's
// load turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/swarm_test.ts");

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
      await waitFor("the API through Traefik", ready, { timeoutMs: 120_000, intervalMs: 500 });
      note(
        `swarm: images built in ${build.ms} ms; deployed and ready through Traefik in ` +
          `${Date.now() - started} ms`,
      );
    } catch (error) {
      deployFailed = error as Error;
      throw error;
    }
  },
});

Deno.test({
  name: "on Swarm a posted user reaches the table",
  ...options,
  async fn() {
    requireDeploy();
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
    note("swarm: POST /users → 202 → row");
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
    // A new replica starts under this load: a push that outlives REDIS_TIMEOUT_MS on the starved
    // machine is answered 503, which may be stored (a CI run saw 11 such rows), so it is held as
    // indeterminate (answer_check.ts); every other answer must be a 202.
    const { outcomes, tooSlow, problem } = holdTooSlowAsIndeterminate(
      await k6Load("scaled", 200, 6),
    );
    await waitFor("the queue to drain", async () => (await pending()) === 0, { timeoutMs: 60_000 });
    const report = checkDelivery(outcomes, await rows("scaled"));
    assert.ok(deliveryHeld(report), describeProblems(report));
    assert.equal(problem, undefined);
    assert.equal(
      report.accepted + tooSlow.length,
      outcomes.length,
      "every request answered 202, or 503 as the queue was too slow",
    );
    // The same prometheus.yml as under compose: Swarm's DNS answers the service name with every
    // task's address (dnsrr), so the third replica is a target without anything else.
    const targetsMs = await waitForTargets(prometheusUrl, { server: 3, "server-consumer": 2 });
    const counted = await waitForStored(prometheusUrl, report.accepted);
    note(
      `swarm: scaled to 3 API replicas in ${ms} ms; ${report.accepted} of ${outcomes.length} ` +
        `accepted and stored, ${tooSlow.length} answered 503 as the queue was too slow ` +
        `(${report.indeterminateStored} of them stored); Prometheus scraped all 5 replicas ` +
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
    const load = k6Load("rolling", 150, loadSeconds);
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
    // The API's own 503 when a push outlives REDIS_TIMEOUT_MS is the bound doing its job on a
    // starved machine, not the update: two CI runs beside the rest of the suite saw 20 and 85,
    // runs beside two or three busy loops 16–369, half of them after the last replica was
    // replaced, and the test alone none. It is held as indeterminate (up to a fifth of them were
    // stored; answer_check.ts). What the update itself could cause is forbidden outright: no
    // answer, 404, 500 or 502, Traefik's 503 for want of a ready replica, or a draining replica's
    // "shutting down".
    const { outcomes, tooSlow, problem } = holdTooSlowAsIndeterminate(await load);
    await waitFor("the queue to drain", async () => (await pending()) === 0, { timeoutMs: 60_000 });
    const report = checkDelivery(outcomes, await rows("rolling"));
    const failed = outcomes.filter((o) => o.kind !== "accepted" && !tooSlow.includes(o));
    const line = `swarm: rolling update of 3 API replicas in ${update.ms} ms under 150 req/s: ` +
      `${report.accepted} of ${outcomes.length} accepted, ${failed.length} failed, ` +
      `${tooSlow.length} answered 503 as the queue was too slow (${report.indeterminateStored} ` +
      `of them stored); lost ${report.lost.length}, duplicated ${report.duplicated.length}`;
    note(line);
    assert.deepEqual(failed.slice(0, 5).map((o) => `${o.status} ${o.detail ?? ""}`), [], line);
    assert.equal(problem, undefined, line);
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
