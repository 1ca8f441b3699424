/**
 * The compose path, run for real: the repo's compose.yaml on the Docker engine `./stack test`
 * starts, driven with the commands the README gives users. The tests share one project and run in
 * file order, each a step users take: up, the course's curl, the course's k6 scripts, scaling,
 * restarts, crashes under load, stop, down and up again. Prometheus is checked where it is cheap:
 * it scrapes every replica after up and after scaling, and counts what the consumers stored. The last test removes everything the
 * project made (containers, network, volumes) and checks that nothing is left.
 *
 * Needs `docker` with the compose plugin and an engine answering; without one the first test fails
 * and says why (it never skips).
 *
 * @module
 */

import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { delay, waitFor } from "@users-pipeline/harness/wait";
import { checkDelivery, deliveryHeld, describeProblems } from "../support/delivery_check.ts";
import { checkAnswers, type Fault, overlaps, QUEUE_UNAVAILABLE } from "../support/answer_check.ts";
import { classify, type Outcome } from "../support/fault_load.ts";
import {
  ANSWER_THROUGH_TRAEFIK_MS,
  ComposeProject,
  ok,
  run,
  targetsOutside,
  usersAcceptedBy,
} from "../support/compose_project.ts";
import { storedSum, waitForStored, waitForTargets } from "../support/prometheus_api.ts";
import { settleKeyed } from "../support/retrying_client.ts";
import { isUuid, queueKeys } from "@users-pipeline/queue";

const CHROMIUM = Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium";
const project = new ComposeProject(`upl${Deno.pid}`, freePort());
/** What each test printed as its figures, repeated at the end. */
const summary: string[] = [];
let upFailed: Error | undefined;

function note(line: string): void {
  summary.push(line);
  console.log(line);
}

/** Fails the tests after a failed `up` at once, with its reason, instead of timing out. */
function requireUp(): void {
  if (upFailed) throw new Error(`the stack did not come up: ${upFailed.message}`);
}

/** POSTs one user the way the course's curl does (form content type, JSON body). */
async function curlPost(
  name: string,
  url = project.url,
): Promise<{ status: number; body: string; headers: string }> {
  const result = ok(
    "curl",
    await run("curl", [
      "-sS",
      "-D",
      "-",
      "-o",
      "-",
      "-X",
      "POST",
      "-d",
      JSON.stringify({ name }),
      `${url}/users`,
    ]),
  );
  const [headers = "", body = ""] = result.stdout.split("\r\n\r\n");
  const status = Number(headers.match(/^HTTP\/[\d.]+ (\d{3})/)?.[1] ?? 0);
  return { status, body, headers };
}

/** The accounting line of a load: what the clients were told against what was stored. */
function accounting(outcomes: readonly Outcome[], stored: number): string {
  const count = (kind: Outcome["kind"]) => outcomes.filter((o) => o.kind === kind).length;
  return `${outcomes.length} sent, ${count("accepted")} accepted, ${count("rejected")} × 503 ` +
    `with Retry-After, ${count("indeterminate")} indeterminate, ${stored} rows`;
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

// These tests start engines, images and containers and drive load: the file holds the machine's
// load turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/deploy/compose_test.ts");

Deno.test({
  name: "docker compose up -d --build --wait brings the whole stack up healthy",
  ...options,
  async fn() {
    const engine = await run("docker", ["info", "--format", "{{.ServerVersion}}"]);
    if (engine.code !== 0) {
      upFailed = new Error(`no Docker engine answers: ${engine.stderr.trim()}`);
      throw upFailed;
    }
    const up = await project.compose(["up", "-d", "--build", "--wait"]);
    if (up.code !== 0) {
      upFailed = new Error(`up exited ${up.code}:\n${up.stderr.slice(-4_000)}`);
      throw upFailed;
    }
    // What a user types next, at once: the images were built a moment ago and every service has
    // just turned healthy, Traefik included (healthy once it routes to a ready replica).
    const first = await curlPost("First after build");
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
  name:
    "on fresh projects, the first POST the moment up --wait returns is a 202 (2 and 4 APIs), and each project's Traefik routes only to its own replicas",
  ...options,
  async fn() {
    requireUp();
    const lines = [];
    for (const scale of [[], ["--scale", "server=4"]]) {
      const fresh = new ComposeProject(`upl${Deno.pid}f${scale.length}`, freePort());
      const started = Date.now();
      try {
        const up = ok("up --wait", await fresh.compose(["up", "-d", ...scale, "--wait"]));
        const first = await curlPost("First on a fresh project", fresh.url);
        assert.equal(
          first.status,
          202,
          `first POST after up --wait ${scale.join(" ")}: ${first.body}`,
        );
        // Two projects of one compose.yaml on one engine: each Traefik routes to its own replicas
        // only (traefik.yml's constraint), so every user sent through one project is stored by
        // that project, never by the other.
        const sent = 8;
        const prefix = `Own project ${scale.length}`;
        for (const [through, label] of [[fresh, "fresh"], [project, "main"]] as const) {
          for (let i = 0; i < sent; i++) {
            const answer = await curlPost(`${prefix} ${label} ${i}`, through.url);
            assert.equal(answer.status, 202, `through the ${label} project: ${answer.body}`);
          }
        }
        for (
          const [store, own, other] of [[fresh, "fresh", "main"], [
            project,
            "main",
            "fresh",
          ]] as const
        ) {
          await waitFor(`the ${own} project's users stored by the ${own} project`, async () => {
            return (await store.rows(`${prefix} ${own}`)).length === sent;
          }, { timeoutMs: 30_000, intervalMs: 200 });
          const strays = await store.rows(`${prefix} ${other}`);
          assert.deepEqual(
            strays,
            [],
            `users sent through the ${other} project stored by the ${own}`,
          );
        }
        // Nor does either Traefik so much as health-check the other's replicas: before it was
        // scoped, each balanced over both projects' replicas, and a request sent to one whose
        // project had just been taken down left the machine by the default route. Traefik names
        // a target only when its health check fails, so one of its own replicas is paused until
        // it does: its log must then name targets, every one its own project's.
        for (const [proxy, label] of [[project, "main"], [fresh, "fresh"]] as const) {
          const own = await proxy.serverAddresses();
          const [paused] = await proxy.containers("server");
          const logs = () =>
            proxy.compose(["logs", "--since", new Date(started).toISOString(), "traefik"])
              .then((result) => ok("docker compose logs traefik", result).stdout);
          ok("docker pause", await run("docker", ["pause", paused!.id]));
          try {
            await waitFor(`the ${label} project's Traefik to fail a health check`, async () => {
              return (await logs()).includes("targetURL=");
            }, { timeoutMs: 15_000, intervalMs: 500 });
          } finally {
            ok("docker unpause", await run("docker", ["unpause", paused!.id]));
          }
          assert.deepEqual(
            targetsOutside(await logs(), own),
            [],
            `the ${label} project's Traefik targets replicas not its own`,
          );
        }
        lines.push(
          `${scale.length ? "4 APIs" : "2 APIs"}: up --wait ${up.ms} ms, then 202; ` +
            `${sent} + ${sent} users each stored by the project they were sent through`,
        );
      } finally {
        await fresh.down();
      }
    }
    note(`first POST on fresh projects: ${lines.join("; ")}`);
  },
});

Deno.test({
  name:
    "a setting in the untracked settings file or the shell reaches every API replica, the shell's first",
  ...options,
  async fn() {
    // What a user does instead of editing project.env: ADMIN_TOKEN (a secret) and a bound of 10
    // in the settings file (compose's .env, here named by --env-file), and a bound of 20 exported
    // in the shell, which wins over the file. No consumer runs, so the queue only fills.
    const token = `file-${crypto.randomUUID()}`;
    const settings = new ComposeProject(`upl${Deno.pid}s`, freePort(), {
      settingsFile: `# untracked\nADMIN_TOKEN=${token}\nQUEUE_MAX_LENGTH=10\n`,
      shell: { QUEUE_MAX_LENGTH: "20" },
    });
    try {
      ok(
        "up --wait",
        await settings.compose(["up", "-d", "--build", "--wait", "--scale", "server-consumer=0"]),
      );
      const servers = await settings.containers("server");
      assert.equal(servers.length, 2);
      for (const server of servers) {
        const env = await settings.containerEnv(server.id);
        assert.equal(env.ADMIN_TOKEN, token, `${server.name}: ADMIN_TOKEN from the file`);
        assert.equal(env.QUEUE_MAX_LENGTH, "20", `${server.name}: QUEUE_MAX_LENGTH from the shell`);
      }
      // The token turns the admin routes on (without it they do not exist: 404).
      const admin = (url: string, bearer?: string) =>
        fetch(`${url}/admin/overview`, {
          headers: bearer === undefined ? {} : { authorization: `Bearer ${bearer}` },
        }).then(async (response) => {
          await response.body?.cancel();
          return response.status;
        });
      assert.equal(await admin(settings.url, token), 200, "the file's token");
      assert.equal(await admin(settings.url), 401, "no token");
      // The shell's bound, not the file's 10 nor project.env's million: 20 users fit, no more.
      const statuses: number[] = [];
      const codes: string[] = [];
      for (let i = 0; i < 25; i++) {
        const response = await fetch(`${settings.url}/users`, {
          method: "POST",
          body: JSON.stringify({ name: `Bounded ${i}` }),
          headers: { "content-type": "application/json" },
        });
        statuses.push(response.status);
        const body = await response.json() as { code?: string };
        if (response.status !== 202) codes.push(body.code ?? "");
      }
      assert.deepEqual(statuses, [...Array(20).fill(202), ...Array(5).fill(503)]);
      assert.deepEqual(codes, Array(5).fill("queue_full"));
      // Each replica serves /metrics on the internal network, and not through Traefik.
      let accepted = 0;
      for (const server of servers) accepted += await usersAcceptedBy(server.id);
      assert.equal(accepted, 20, "the replicas' own counters");
      const metrics = await fetch(`${settings.url}/metrics`);
      await metrics.body?.cancel();
      assert.equal(metrics.status, 404, "GET /metrics through Traefik");
      note(
        "settings: ADMIN_TOKEN from the file and QUEUE_MAX_LENGTH=20 from the shell (the file's " +
          "10 overridden) in both API replicas; admin routes on; 20 of 25 accepted, 5 queue_full",
      );
    } finally {
      await settings.down();
    }
  },
});

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
      const first = await curlPost("Front door", front.url);
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
  name: "the course's curl right after up answers 202 every time and the user reaches the table",
  ...options,
  async fn() {
    requireUp();
    // Right after --wait: every replica Traefik routes to must be able to queue (no 500 while a
    // replica is still starting, as Traefik 3.6 gives with allowEmptyServices).
    const answers = [];
    for (let i = 0; i < 20; i++) answers.push(await curlPost(`Queueing ${i}`));
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
    requireUp();
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

for (const script of ["hello-k6.js", "e2e-k6.js", "keyed-k6.js"]) {
  Deno.test({
    name: `docker compose run --rm --entrypoint=k6 k6-tests run /tests/${script} passes`,
    ...options,
    async fn() {
      requireUp();
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
  name: "scaled to 4 APIs and 3 consumers: every API replica gets traffic, every consumer stores",
  ...options,
  async fn() {
    requireUp();
    const scale = ["--scale", "server=4", "--scale", "server-consumer=3"];
    ok("up --scale", await project.compose(["up", "-d", ...scale, "--wait"]));
    const servers = await project.containers("server");
    const consumers = await project.containers("server-consumer");
    assert.equal(servers.filter((c) => c.state === "running").length, 4);
    assert.equal(consumers.filter((c) => c.state === "running").length, 3);
    // The new replicas are Prometheus targets too: before the load, so the consumers' stored
    // counters read now are this load's baseline.
    const targetsMs = await waitForTargets(project.prometheusUrl, {
      server: 4,
      "server-consumer": 3,
    });
    const storedBefore = await storedSum(project.prometheusUrl);
    const before = await Promise.all(servers.map((c) => usersAcceptedBy(c.id)));
    // No fault here: every request is answered 202, by whichever replica Traefik picks.
    const outcomes = await project.acceptedLoad("scaled", { rate: 300, seconds: 10 });
    const served = (await Promise.all(servers.map((c) => usersAcceptedBy(c.id))))
      .map((n, i) => n - before[i]!);
    await project.waitDrained();
    const report = checkDelivery(outcomes, await project.rows("scaled"));
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
    // Each replica's own counter: all four answered (the two new ones join Traefik's rotation a
    // second or two into the load), and together exactly this load.
    assert.ok(served.every((n) => n > 0), `users accepted per API replica: ${served}`);
    assert.equal(served.reduce((a, b) => a + b, 0), report.accepted, `per replica: ${served}`);
    // What the consumers counted since the baseline is exactly this load's users.
    const counted = await waitForStored(project.prometheusUrl, report.accepted, {
      baseline: storedBefore,
    });
    assert.equal(counted, report.accepted, "Prometheus counted this load's users once");
    // Each consumer's last log line, on a graceful stop, counts what it stored.
    const stop = ok("stop server-consumer", await project.compose(["stop", "server-consumer"]));
    const logs = ok("logs", await project.compose(["logs", "--no-log-prefix", "server-consumer"]));
    const storedBy = logs.stdout.split("\n").filter((l) => l.includes('"event":"stopped"'))
      .map((l) => JSON.parse(l).stored as number);
    assert.equal(storedBy.length, 3, logs.stdout.slice(-2_000));
    assert.ok(storedBy.every((n) => n > 0), `stored per consumer: ${storedBy}`);
    ok("up --scale", await project.compose(["up", "-d", ...scale, "--wait"]));
    note(
      `scaled 4 APIs × 3 consumers: ${accounting(outcomes, report.accepted)}; accepted per API ` +
        `${served.join(", ")}; stored per ` +
        `consumer ${storedBy.join(", ")} (consumers stopped in ${stop.ms} ms); Prometheus ` +
        `scraped all 7 replicas (${targetsMs} ms) and counted ${counted} users stored`,
    );
  },
});

Deno.test({
  name: "with ADMIN_TOKEN set, the dashboard, /admin and /openapi.json answer through Traefik",
  ...options,
  async fn() {
    requireUp();
    // What an operator does to turn the admin routes on: set the token (here in an override file
    // rather than in the repo's project.env) and recreate the API replicas.
    const dir = await Deno.makeTempDir({ prefix: "compose-admin-" });
    const token = "compose-test-admin-token-0123456789";
    try {
      const override = `${dir}/admin.yaml`;
      await Deno.writeTextFile(
        override,
        `services:\n  server:\n    environment:\n      ADMIN_TOKEN: ${token}\n`,
      );
      const files = ["-f", "compose.yaml", "-f", override];
      const scale = ["--scale", "server=4", "--scale", "server-consumer=3"];
      const up = ok(
        "up with the token",
        await project.compose([...files, "up", "-d", ...scale, "--wait"]),
      );
      const admin = { Authorization: `Bearer ${token}` };
      // Traefik adds the recreated replicas 1-2 s after they turn healthy: poll.
      let overview: { stored_total: number } | undefined;
      await waitFor("the admin overview through Traefik", async () => {
        const response = await fetch(`${project.url}/admin/overview`, { headers: admin })
          .catch(() => undefined);
        if (response?.status === 200) overview = await response.json();
        else await response?.body?.cancel();
        return overview !== undefined;
      }, { timeoutMs: 30_000, intervalMs: 200 });
      const stored = overview!.stored_total;
      const refused = await fetch(`${project.url}/admin/overview`);
      await refused.body?.cancel();
      assert.equal(refused.status, 401);
      const openapi = await fetch(`${project.url}/openapi.json`);
      assert.equal(openapi.status, 200);
      assert.match((await openapi.json()).openapi, /^3\./);

      // The page itself, in Chromium, as an operator opens it.
      const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
      try {
        const page = await browser.newPage();
        await page.goto(`${project.url}/dashboard`);
        await page.locator("#token").fill(token);
        await page.locator("#login button").click();
        await waitFor(
          "the dashboard to list the 3 consumers and the stored total",
          async () =>
            (await page.locator("#consumers tbody tr").count()) === 3 &&
            Number((await page.locator("#stored-total").textContent())?.replaceAll(",", "")) >=
              stored,
          { timeoutMs: 15_000, intervalMs: 200 },
        );
      } finally {
        await browser.close();
      }
      note(
        `admin on (${up.ms} ms to recreate 4 APIs): overview, 401 without the token, ` +
          `/openapi.json, and the dashboard in Chromium showing 3 consumers and ` +
          `${stored} stored`,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "while every API replica restarts, clients get 202 or 503 with Retry-After, never 404, 500 or 502",
  ...options,
  async fn() {
    requireUp();
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
    requireUp();
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
    requireUp();
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
