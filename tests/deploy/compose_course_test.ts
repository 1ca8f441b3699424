/**
 * The compose path the README and the course give, run for real: the repo's compose.yaml on the
 * Docker engine `./stack test` starts, brought up with `docker compose up -d --build --wait`, then
 * the course's curl, its `redis-cli LPUSH`, its k6 scripts (and the batch route's, bulk-k6.js)
 * through `docker compose run`, the `./stack` helpers (on a project of their own) and `down -v`.
 * The tests share one project and run in file order; Prometheus is checked where it is cheap: it
 * scrapes every replica after up. The last test removes everything the project made (containers,
 * network, volumes) and checks that nothing is left.
 *
 * Needs `docker` with the compose plugin and an engine answering; without one each test fails and
 * says why (none skips).
 *
 * @module
 */

import assert from "node:assert/strict";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { waitFor } from "@users-pipeline/harness/wait";
import { ComposeProject, curlPost, ok, run, upOnce } from "../support/compose_project.ts";
import { waitForTargets } from "../support/prometheus_api.ts";
import { isUuid, queueKeys } from "@users-pipeline/queue";

const project = new ComposeProject(`upl${Deno.pid}`, freePort());
const ready = upOnce(project, ["-d", "--build", "--wait"]);
/** What each test printed as its figures, repeated at the end. */
const summary: string[] = [];

function note(line: string): void {
  summary.push(line);
  console.log(line);
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests build images, start containers and drive load: the file holds the machine's load turn
// from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/deploy/compose_course_test.ts");

Deno.test({
  name: "docker compose up -d --build --wait brings the whole stack up healthy",
  ...options,
  async fn() {
    const up = await ready();
    // What a user types next, at once: the images were built a moment ago and every service has
    // just turned healthy, Traefik included (healthy once it routes to a ready replica).
    const first = await curlPost(project.url, "First after build");
    assert.equal(first.status, 202, `the first POST after up --build --wait: ${first.body}`);
    const containers = await project.containers();
    const running = containers.filter((c) => c.state === "running");
    assert.equal(running.length, containers.length, JSON.stringify(containers));
    const expected = ["database", "k6-tests", "prometheus", "redis", "server", "server"]
      .concat(["server-consumer", "server-consumer", "traefik"]);
    assert.deepEqual(containers.map((c) => c.service).sort(), expected);
    for (const c of containers.filter((c) => c.health !== "")) {
      assert.equal(c.health, "healthy", `${c.name} is ${c.health}`);
    }
    // Prometheus finds the replicas by DNS on its own (prometheus/prometheus.yml).
    const targetsMs = await waitForTargets(project.prometheusUrl, {
      server: 2,
      "server-consumer": 2,
    });
    // /metrics is Prometheus's, on the internal network: through Traefik's public port it is not
    // there, while Prometheus scrapes every replica (above).
    const metrics = await fetch(`${project.url}/metrics`);
    await metrics.body?.cancel();
    assert.equal(metrics.status, 404, "GET /metrics through Traefik");
    note(
      `compose up --build --wait: ${containers.length} containers healthy in ${up.ms} ms; ` +
        `Prometheus scraped all 4 replicas ${targetsMs} ms later; /metrics through Traefik: 404`,
    );
  },
});

Deno.test({
  name: "the course's curl right after up answers 202 every time and the user reaches the table",
  ...options,
  async fn() {
    await ready();
    // Right after --wait: every replica Traefik routes to must be able to queue (no 500 while a
    // replica is still starting, as Traefik 3.6 gives with allowEmptyServices).
    const answers = [];
    for (let i = 0; i < 20; i++) answers.push(await curlPost(project.url, `Queueing ${i}`));
    const statuses = answers.map((a) => a.status);
    assert.deepEqual(statuses, Array(20).fill(202), answers.map((a) => a.body).join("\n"));
    const id = JSON.parse(answers[0]!.body).id as string;
    assert.match(answers[0]!.headers, new RegExp(`[Ll]ocation: /users/${id}`));
    await waitFor("the curl's user in the table", async () => {
      return (await project.sql(`select count(*) from users where id = '${id}'`))[0]?.[0] === "1";
    }, { timeoutMs: 30_000, intervalMs: 200 });
    const stored = await project.rows("Queueing");
    assert.equal(stored.length, 20);
    note(`the course's curl: 20 of 20 answered 202 right after up, 20 rows`);
  },
});

Deno.test({
  name: "redis-cli LPUSH users '{\"name\":…}', the course's push, reaches the table with an id",
  ...options,
  async fn() {
    await ready();
    const names = ["Ada", "Grace", "Ada"].map((name, i) => `${name} raw ${i}`);
    const deadBefore = await project.redis("LLEN", queueKeys("users").dead);
    for (const name of names) {
      assert.match(await project.redis("LPUSH", "users", JSON.stringify({ name })), /^\d+$/);
    }
    const rows = async () =>
      await project.sql(`select name, id from users where name like '% raw %' order by name`);
    await waitFor("the pushed users in the table", async () => {
      return (await rows()).length >= names.length;
    }, { timeoutMs: 30_000, intervalMs: 200 });
    const stored = await rows();
    assert.deepEqual(stored.map((row) => row[0]), names.toSorted());
    for (const [, id] of stored) assert.ok(isUuid(id ?? ""), `a UUID: ${id}`);
    assert.equal(new Set(stored.map((row) => row[1])).size, names.length, "each its own id");
    assert.equal(
      await project.redis("LLEN", queueKeys("users").dead),
      deadBefore,
      "nothing buried",
    );
    note(`redis-cli LPUSH users: ${names.length} of ${names.length} stored, each with its own id`);
  },
});

for (const script of ["hello-k6.js", "e2e-k6.js", "keyed-k6.js", "bulk-k6.js"]) {
  Deno.test({
    name: `docker compose run --rm --entrypoint=k6 k6-tests run /tests/${script} passes`,
    ...options,
    async fn() {
      await ready();
      const result = await project.compose([
        "run",
        "--rm",
        "--entrypoint=k6",
        "k6-tests",
        "run",
        "--quiet",
        "-e",
        "DURATION=5s",
        `/tests/${script}`,
      ]);
      assert.equal(
        result.code,
        0,
        `k6 ${script}:\n${result.stdout.slice(-3_000)}\n${result.stderr}`,
      );
      const checks = result.stdout.match(/checks_succeeded[.: ]+([\d.]+%)\s+(\d+) out of (\d+)/);
      note(`k6 ${script} through compose: exit 0, checks ${checks?.slice(1).join(" ") ?? "?"}`);
    },
  });
}

Deno.test({
  name:
    "./stack up, psql, redis-cli, dlq, k6 and down work on the compose project, and up says where it listens",
  ...options,
  async fn() {
    const front = new ComposeProject(`upl${Deno.pid}d`, freePort(), {
      settingsFile: "ADMIN_TOKEN=stack-front-door-token\n",
    });
    try {
      const up = ok("./stack up", await front.stack(["up", "--servers", "1", "--consumers", "1"]));
      assert.match(up.stdout, new RegExp(`^API +http://localhost:${front.port} `, "m"));
      assert.match(
        up.stdout,
        new RegExp(`^Dashboard +http://localhost:${front.port}/dashboard`, "m"),
      );
      assert.match(
        up.stdout,
        new RegExp(`^Prometheus +http://localhost:${front.prometheusPort}$`, "m"),
      );
      assert.deepEqual(
        (await front.containers()).map((c) => c.service).sort(),
        ["database", "k6-tests", "prometheus", "redis", "server", "server-consumer", "traefik"],
      );
      const first = await curlPost(front.url, "Front door");
      assert.equal(first.status, 202, first.body);
      await waitFor("the user in the table", async () => {
        const psql = await front.stack(["psql", "-At", "-c", "select count(*) from users"]);
        return psql.code === 0 && psql.stdout.trim() === "1";
      }, { timeoutMs: 30_000, intervalMs: 300 });
      const llen = ok("./stack redis-cli", await front.stack(["redis-cli", "llen", "users"]));
      assert.equal(llen.stdout.trim(), "0");
      const dlq = ok("./stack dlq list", await front.stack(["dlq", "list"]));
      assert.equal(dlq.stdout.trim(), "0 dead letters; by reason: {}");
      // Its container went with the script: the project's network holds the project's
      // containers only.
      await waitFor("the project's network to hold its own containers only", async () => {
        const attached = ok(
          "docker ps",
          await run("docker", ["ps", "-aq", "--filter", `network=${front.name}_default`]),
        ).stdout.split("\n").filter((id) => id !== "");
        return attached.length === (await front.containers()).length;
      }, { timeoutMs: 10_000, intervalMs: 500 });
      const k6 = ok(
        "./stack k6",
        await front.stack(["k6", "hello-k6.js", "--quiet", "-e", "DURATION=3s"]),
      );
      assert.match(k6.stdout, /checks_succeeded/);
      ok("./stack down --volumes", await front.stack(["down", "--volumes"]));
      assert.deepEqual(await front.containers(), [], "down leaves no container");
      const after = await front.stack(["psql", "-c", "select 1"]);
      assert.equal(after.code, 1);
      assert.match(after.stderr, /The stack is not running .*\.\/stack up/);
      note(
        `./stack up: 1 API and 1 consumer healthy in ${up.ms} ms; psql, redis-cli, dlq, k6 and ` +
          "down --volumes on the compose project",
      );
    } finally {
      await front.down();
    }
  },
});

Deno.test({
  name: "docker compose down -v removes every container, network and volume of the project",
  ...options,
  async fn() {
    const down = await project.down();
    const label = `label=com.docker.compose.project=${project.name}`;
    const left = [];
    for (const kind of ["container", "network", "volume"]) {
      const ls = ok(
        `${kind} ls`,
        await run("docker", [
          kind,
          "ls",
          "-q",
          ...(kind === "container" ? ["-a"] : []),
          "--filter",
          label,
        ]),
      );
      if (ls.stdout.trim()) left.push(`${kind}s: ${ls.stdout.trim().replaceAll("\n", " ")}`);
    }
    assert.deepEqual(left, []);
    note(`down -v in ${down.ms} ms, nothing left`);
    console.log(`\ncompose summary:\n  ${summary.join("\n  ")}`);
  },
});
