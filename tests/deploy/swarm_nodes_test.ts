/**
 * compose.yaml on a swarm of three engines (tools/harness/swarm_nodes.ts: three network
 * namespaces on one bridge, a dockerd in each, one manager and two workers, VXLAN between them):
 * `docker stack deploy -c compose.yaml -c compose.swarm-nodes.yaml`, with Redis, PostgreSQL,
 * Prometheus and Traefik on the data node (the manager) and the API and the consumers spread over
 * all three. Under k6 load from the host through the manager's Traefik, a worker is lost as a
 * machine is (link down, every process of it killed at once); the swarm marks it down and
 * starts its tasks on the other two, and every 202 still ends as exactly one row.
 *
 * Without IPVS there are no virtual IPs or routing mesh: every service uses DNS round robin and
 * Traefik publishes its port in host mode, balancing over the tasks' own addresses
 * (docs/operations.md, "Docker Swarm"). The tests run in file order; the last removes the engines
 * and everything of theirs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type SwarmNode, SwarmNodes } from "@users-pipeline/harness/swarm_nodes";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import {
  acceptedK6Args,
  ANSWER_THROUGH_TRAEFIK_MS,
  ok,
  parseAcceptedLines,
  pendingIn,
  run,
} from "../support/compose_project.ts";
import { checkAnswers, type Fault } from "../support/answer_check.ts";
import { checkDelivery, deliveryHeld, describeProblems } from "../support/delivery_check.ts";
import { waitForQuery, waitForTargets } from "../support/prometheus_api.ts";

/** The README's stack name: the swarm is this test's own. */
const STACK = "users";
/** Which images each node needs: the data node runs everything, the others the Deno services. */
const DENO_IMAGES = ["users-pipeline/server:latest", "users-pipeline/server-consumer:latest"];
const DATA_IMAGES = ["redis:7.0", "postgres:17", "traefik:v3.6", "prom/prometheus:v2.42.0"];
const REPLICAS = {
  traefik: 1,
  redis: 1,
  database: 1,
  prometheus: 1,
  server: 3,
  "server-consumer": 3,
};

let swarm: SwarmNodes | undefined;
let deployFailed: Error | undefined;
const summary: string[] = [];
/**
 * docs/operations.md, "Docker Swarm": how soon Traefik stops sending to a lost node (two 1 s
 * checks, a margin).
 */
const NODE_LOSS_NOTICED_MS = 2_500;

function note(line: string): void {
  summary.push(line);
  console.log(line);
}

function nodes(): SwarmNodes {
  if (deployFailed || !swarm) {
    throw new Error(`the stack was not deployed: ${deployFailed?.message ?? "no swarm"}`);
  }
  return swarm;
}

/** `docker` against a node's engine, in the repo (compose paths are relative to it). */
function docker(node: SwarmNode, args: readonly string[], options: { stdin?: string } = {}) {
  return run("docker", ["-H", `unix://${node.socket}`, ...args], {
    env: { TRAEFIK_CONFIG: "traefik-swarm.yml" },
    ...options,
  });
}

/** Where Traefik answers: the manager's address, port 8000 (host mode, in its own namespace). */
function baseUrl(): string {
  return `http://${nodes().manager.address}:8000`;
}

/** Prometheus, published in host mode on the manager as Traefik is. */
function prometheusUrl(): string {
  return `http://${nodes().manager.address}:9090`;
}

/** The nodes running each service's tasks, e.g. {server: ["node1", "node2", "node3"], …}. */
async function placement(): Promise<Record<string, string[]>> {
  const ps = ok(
    "docker stack ps",
    await docker(nodes().manager, [
      "stack",
      "ps",
      STACK,
      "--filter",
      "desired-state=running",
      "--format",
      "{{.Name}} {{.Node}} {{.CurrentState}}",
    ]),
  );
  const where: Record<string, string[]> = {};
  for (const line of ps.stdout.split("\n")) {
    const match = line.match(/^[a-z0-9]+_([a-z0-9-]+)\.\d+ (\S+) Running/);
    if (match) (where[match[1]!] ??= []).push(match[2]!);
  }
  for (const list of Object.values(where)) list.sort();
  return where;
}

function describePlacement(where: Record<string, string[]>): string {
  return Object.entries(where).sort().map(([service, on]) => `${service} on ${on.join(",")}`)
    .join("; ");
}

/** Waits until every service runs its replicas, none on `avoid`; returns the placement. */
async function waitForPlacement(
  { avoid, timeoutMs = 180_000 }: { avoid?: string; timeoutMs?: number } = {},
): Promise<Record<string, string[]>> {
  let last: Record<string, string[]> = {};
  await waitFor(
    () => `tasks ${JSON.stringify(REPLICAS)} off ${avoid} (running: ${JSON.stringify(last)})`,
    async () => {
      last = await placement();
      return Object.entries(REPLICAS).every(([service, n]) =>
        last[service]?.length === n && !last[service]?.includes(avoid ?? "")
      );
    },
    { timeoutMs, intervalMs: 1_000 },
  );
  return last;
}

/** A running container of the stack's service on the manager. */
async function container(service: string): Promise<string> {
  const ps = ok(
    "docker ps",
    await docker(nodes().manager, [
      "ps",
      "-q",
      "--filter",
      `label=com.docker.swarm.service.name=${STACK}_${service}`,
    ]),
  );
  const id = ps.stdout.trim().split("\n")[0];
  if (!id) throw new Error(`no running container of ${STACK}_${service} on the manager`);
  return id;
}

async function rows(prefix: string) {
  const result = ok(
    "psql",
    await docker(nodes().manager, [
      "exec",
      "-i",
      await container("database"),
      "sh",
      "-c",
      'psql -v ON_ERROR_STOP=1 -At -F "\t" -U "$POSTGRES_USER" -d "$POSTGRES_DB"',
    ], { stdin: `select id, name from users where name like '${prefix} %'` }),
  );
  return result.stdout.split("\n").filter((l) => l !== "").map((l) => l.split("\t"))
    .map(([id, name]) => ({ id: id!, name: name! }));
}

async function pending(): Promise<number> {
  const redis = await container("redis");
  return pendingIn(async (...args) =>
    ok("redis-cli", await docker(nodes().manager, ["exec", redis, "redis-cli", ...args])).stdout
      .trim()
  );
}

/** `docker node ls` through the manager: hostname → status (Ready, Down). */
async function nodeStatus(): Promise<Record<string, string>> {
  const ls = ok(
    "docker node ls",
    await docker(nodes().manager, ["node", "ls", "--format", "{{.Hostname}} {{.Status}}"]),
  );
  return Object.fromEntries(
    ls.stdout.split("\n").filter((l) => l.trim() !== "").map((l) => l.split(" ")),
  );
}

async function ready(): Promise<boolean> {
  const response = await fetch(`${baseUrl()}/readyz`, { signal: AbortSignal.timeout(3_000) })
    .catch(() => undefined);
  await response?.body?.cancel();
  return response?.status === 200;
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests start engines, images and containers and drive load: the file holds the machine's
// load turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/deploy/swarm_nodes_test.ts");

Deno.test({
  name: "compose.yaml deploys on three engines: data services on the manager, the rest spread",
  ...options,
  async fn() {
    try {
      const started = Date.now();
      // The Deno images are built on the host's engine, as the other Docker tests build them.
      const build = ok(
        "docker compose build",
        await run("docker", ["compose", "-p", `uplnodes${Deno.pid}`, "build"]),
      );
      swarm = await SwarmNodes.start({ count: 3 });
      const swarmMs = Date.now() - started - build.ms;
      const [manager, ...workers] = swarm.nodes;
      await swarm.label(manager!, { "pipeline.data": "true", "pipeline.zone": "zone1" });
      for (const worker of workers) {
        await swarm.label(worker, { "pipeline.zone": `zone${worker.index}` });
      }
      const loadStarted = Date.now();
      await Promise.all([
        swarm.loadImages(DENO_IMAGES, swarm.nodes),
        swarm.loadImages(DATA_IMAGES, [manager!]),
      ]);
      const loadMs = Date.now() - loadStarted;
      const deployStarted = Date.now();
      ok(
        "docker stack deploy",
        await docker(manager!, [
          "stack",
          "deploy",
          "--detach=true",
          // No registry to ask for digests: the nodes have the images already.
          "--resolve-image=never",
          "-c",
          "compose.yaml",
          "-c",
          "compose.swarm-nodes.yaml",
          STACK,
        ]),
      );
      const where = await waitForPlacement();
      await waitFor("the API through Traefik", ready, { timeoutMs: 120_000, intervalMs: 500 });
      // Prometheus on the data node finds every replica by DNS and scrapes it over the overlay.
      const targetsMs = await waitForTargets(prometheusUrl(), { server: 3, "server-consumer": 3 }, {
        timeoutMs: 60_000,
      });
      const status = await nodeStatus();
      // Tasks replaced while starting (a consumer unhealthy while PostgreSQL initialises, say).
      const replaced = ok(
        "docker stack ps",
        await docker(manager!, [
          "stack",
          "ps",
          STACK,
          "--no-trunc",
          "--format",
          "{{.DesiredState}} {{.Name}} {{.Node}}: {{.Error}}",
        ]),
      ).stdout.split("\n").filter((l) => l.startsWith("Shutdown ")).map((l) => l.slice(9));
      note(
        `swarm of 3: nodes ${JSON.stringify(status)}; engines and swarm in ${swarmMs} ms, ` +
          `images copied in ${loadMs} ms, deployed and ready through Traefik at ${baseUrl()} in ` +
          `${Date.now() - deployStarted} ms; Prometheus scraped all 6 replicas (${targetsMs} ms)`,
      );
      note(`swarm of 3: placement ${describePlacement(where)}`);
      note(`swarm of 3: ${replaced.length} tasks replaced while starting: ${replaced.join("; ")}`);
      for (const service of ["traefik", "redis", "database", "prometheus"]) {
        assert.deepEqual(where[service], [manager!.hostname], `${service} on the data node`);
      }
      for (const service of ["server", "server-consumer"]) {
        assert.deepEqual(where[service], swarm.nodes.map((n) => n.hostname), `${service} spread`);
      }
    } catch (error) {
      deployFailed = error as Error;
      // What the swarm says about its tasks, for the reader of a failed run.
      if (swarm) {
        const ps = await docker(swarm.manager, ["stack", "ps", STACK, "--no-trunc"]);
        console.log(`docker stack ps ${STACK}:\n${ps.stdout}${ps.stderr}`);
      }
      throw error;
    }
  },
});

Deno.test({
  name: "a worker lost under k6 load: its tasks move to the other nodes, every 202 is one row",
  ...options,
  async fn() {
    const swarm = nodes();
    const victim = swarm.nodes[2]!;
    const loadSeconds = 90;
    const rate = 100;
    const loadStarted = Date.now();
    const load = run(
      "k6",
      acceptedK6Args("tests/k6/accepted-k6.js", {
        prefix: "nodeloss",
        rate,
        seconds: loadSeconds,
        baseUrl: baseUrl(),
      }),
    );
    // Traefik balances over the tasks of all three nodes: each API replica accepts users.
    await delay(8_000);
    const perReplica = await waitForQuery(
      prometheusUrl(),
      "users_pipeline_users_accepted_total > 0",
      (samples) => samples.length === 3,
      { timeoutMs: 20_000 },
    );
    const before = await placement();
    for (const service of ["server", "server-consumer"]) {
      assert.ok(
        before[service]?.includes(victim.hostname),
        `${service} runs on ${victim.hostname}`,
      );
    }
    const lostAt = Date.now();
    const killed = await swarm.lose(victim);
    let status: Record<string, string> = {};
    const downMs = await waitFor(
      () => `${victim.hostname} marked down (nodes: ${JSON.stringify(status)})`,
      async () => (status = await nodeStatus())[victim.hostname] === "Down",
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    const after = await waitForPlacement({ avoid: victim.hostname });
    const movedMs = Date.now() - lostAt;
    // The check means something only if load kept coming after the tasks had moved (the loss
    // is noticed after some missed heartbeats, 6 s on an idle machine, up to 25 s on a busy one;
    // the new tasks start in seconds more).
    const movedAt = Date.now() - loadStarted;
    assert.ok(
      movedAt < loadSeconds * 1_000 - 10_000,
      `the tasks ran again ${movedAt} ms into a ${loadSeconds} s load: too late to be under load`,
    );
    const k6 = ok("k6", await load);
    const outcomes = parseAcceptedLines(`${k6.stdout}\n${k6.stderr}`);
    const drainMs = await waitFor("the queue to drain", async () => (await pending()) === 0, {
      timeoutMs: 90_000,
      intervalMs: 500,
    });
    const stored = await rows("nodeloss");
    const report = checkDelivery(outcomes, stored);
    // docs/operations.md, "Docker Swarm": Traefik stops sending to a dead node's replicas within a
    // second or two (its health check runs every second with a 1 s timeout); a request already on
    // its way there never gets an answer, and Traefik answers 504 after its 3 s
    // responseHeaderTimeout (traefik.yml). So the only answers other than 202 are those cut in that
    // window, at most every request sent during it, and none waits longer than that timeout.
    const loss: Fault = {
      what: "a worker lost",
      from: lostAt,
      to: lostAt + NODE_LOSS_NOTICED_MS,
      excuses: ["cut"],
      slowerByMs: 3_000,
    };
    const answerReport = checkAnswers(outcomes, [loss], {
      answerWithinMs: ANSWER_THROUGH_TRAEFIK_MS,
      maxIndeterminate: rate * NODE_LOSS_NOTICED_MS / 1_000,
    });
    note(`node loss: before ${describePlacement(before)}`);
    note(
      `node loss: users accepted per API replica before the loss: ${
        perReplica.map((s) => `${s.labels.instance} ${s.value}`).join(", ")
      }`,
    );
    note(
      `node loss: ${victim.hostname} lost ${lostAt - loadStarted} ms into the load (${killed} ` +
        `processes killed, link down); marked Down after ${downMs} ms; its tasks running ` +
        `elsewhere after ${movedMs} ms`,
    );
    note(`node loss: after ${describePlacement(after)}`);
    const line = `node loss: ${outcomes.length} requests at ${rate}/s for ${loadSeconds} s: ` +
      `${report.accepted} accepted (202), ${report.rejected} refused (503 + Retry-After), ` +
      `${report.indeterminate} without an answer (${report.indeterminateStored} of them stored); ` +
      `${stored.length} rows; lost ${report.lost.length}, duplicated ` +
      `${report.duplicated.length}; queue drained ${drainMs} ms after the load`;
    note(line);
    assert.ok(report.accepted > 0, line);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
    assert.deepEqual(answerReport.problems, [], line);
  },
});

Deno.test({
  name: "the multi-node swarm test removes its engines, namespaces and data",
  ...options,
  async fn() {
    const started = Date.now();
    await swarm?.remove();
    if (swarm) {
      const links = ok("ip link", await run("ip", ["-o", "link", "show"])).stdout;
      for (const node of swarm.nodes) {
        assert.ok(!links.includes(node.link), `${node.link} is gone`);
      }
      await assert.rejects(Deno.stat(swarm.dir), Deno.errors.NotFound);
    }
    note(`swarm of 3: removed in ${Date.now() - started} ms`);
    console.log(`\nmulti-node swarm summary:\n  ${summary.join("\n  ")}`);
  },
});
