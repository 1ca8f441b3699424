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
import { freePort } from "../tools/harness/ports.ts";
import { holdLoadTurnForFile } from "../tools/harness/load_turn.ts";
import { delay, waitFor } from "../tools/harness/wait.ts";
import { checkDelivery, deliveryHeld, describeProblems, type Row } from "./delivery_check.ts";
import { holdTooSlowAsIndeterminate } from "./answer_check.ts";
import type { Outcome } from "./fault_load.ts";
import { ComposeProject, ok, run } from "./compose_project.ts";
import { waitForStored, waitForTargets } from "./prometheus_api.ts";

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
async function curlPost(name: string): Promise<{ status: number; body: string; headers: string }> {
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
      `${project.url}/users`,
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
 * checkDelivery(), except that a user answered 503 may be stored: a 503 the API gave because a
 * broken connection to Redis cut the reply off can belong to a push Redis ran, so the API does not
 * promise 202 for it (README, "The API"). Those rows are counted and returned; any other row the
 * clients were not promised still fails the delivery check.
 */
function checkAllowing503Stored(outcomes: readonly Outcome[], rows: readonly Row[]) {
  const full = checkDelivery(outcomes, rows);
  const refused = new Set(outcomes.filter((o) => o.kind === "rejected").map((o) => o.name));
  return {
    report: { ...full, unexpectedRows: full.unexpectedRows.filter((name) => !refused.has(name)) },
    storedAfter503: full.unexpectedRows.filter((name) => refused.has(name)),
  };
}

const options = { sanitizeOps: false, sanitizeResources: false };

// These tests start engines, images and containers and drive load: the file holds the machine's
// load turn from its first test to its last, so no fault scenario runs beside it (load_turn.ts).
holdLoadTurnForFile("tests/compose_test.ts");

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
    note(
      `compose up --build --wait: ${containers.length} containers healthy in ${up.ms} ms; ` +
        `Prometheus scraped all 4 replicas ${targetsMs} ms later`,
    );
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

for (const script of ["hello-k6.js", "e2e-k6.js"]) {
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
    // Traefik adds a replica 1-2 s after it turns healthy: poll, don't sleep.
    const before = new Map<string, number>();
    for (const c of servers) before.set(c.id, await project.receivedBytes(c.id));
    // Nothing fails on purpose here: the only 503 allowed is the API's own for a push that
    // outlived REDIS_TIMEOUT_MS on the starved machine, held as indeterminate (answer_check.ts).
    const { outcomes, tooSlow, problem } = holdTooSlowAsIndeterminate(
      await project.acceptedLoad("scaled", { rate: 300, seconds: 10 }),
    );
    const received = [];
    for (const c of servers) received.push((await project.receivedBytes(c.id)) - before.get(c.id)!);
    await project.waitDrained();
    const report = checkDelivery(outcomes, await project.rows("scaled"));
    assert.ok(deliveryHeld(report), describeProblems(report));
    assert.equal(problem, undefined);
    assert.equal(report.indeterminate, tooSlow.length, "no request went unanswered");
    // The new replicas are Prometheus targets too, and their counts reach it: the consumers'
    // counters (never reset in this project so far) add up to at least this load's users.
    const targetsMs = await waitForTargets(project.prometheusUrl, {
      server: 4,
      "server-consumer": 3,
    });
    const counted = await waitForStored(project.prometheusUrl, report.accepted);
    // Each POST carries ~200 bytes; Traefik's health checks a few hundred bytes a second. A
    // replica that got a fair share of 3,000 posts received far more than a tenth of it.
    const fairShare = received.reduce((a, b) => a + b, 0) / servers.length;
    for (const [i, bytes] of received.entries()) {
      assert.ok(
        bytes > fairShare / 10,
        `API replica ${i + 1} received ${bytes} bytes of ${received}`,
      );
    }
    // Each consumer's last log line, on a graceful stop, counts what it stored.
    const stop = ok("stop server-consumer", await project.compose(["stop", "server-consumer"]));
    const logs = ok("logs", await project.compose(["logs", "--no-log-prefix", "server-consumer"]));
    const storedBy = logs.stdout.split("\n").filter((l) => l.includes('"event":"stopped"'))
      .map((l) => JSON.parse(l).stored as number);
    assert.equal(storedBy.length, 3, logs.stdout.slice(-2_000));
    assert.ok(storedBy.every((n) => n > 0), `stored per consumer: ${storedBy}`);
    ok("up --scale", await project.compose(["up", "-d", ...scale, "--wait"]));
    note(
      `scaled 4 APIs × 3 consumers: ${
        accounting(outcomes, report.accepted + report.indeterminateStored)
      }; bytes received ` +
        `per API ${received.map((b) => `${Math.round(b / 1024)} KiB`).join(", ")}; stored per ` +
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
    const seen = new Map<string, number>();
    /** Each forbidden answer, with when it came relative to the restart command. */
    const forbidden: string[] = [];
    let restartAt = Date.now();
    let polling = true;
    const poller = (async () => {
      let i = 0;
      while (polling) {
        const response = await fetch(`${project.url}/users`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ name: `restart ${i++}` }),
        }).catch((error) => error as Error);
        const at = Date.now() - restartAt;
        if (response instanceof Error) {
          seen.set("network error", (seen.get("network error") ?? 0) + 1);
          forbidden.push(`${at} ms: ${response.message}`);
        } else {
          const retryAfter = response.headers.get("Retry-After");
          const key = `${response.status}${retryAfter ? " Retry-After" : ""}`;
          seen.set(key, (seen.get(key) ?? 0) + 1);
          const body = (await response.text()).slice(0, 80);
          if (!(response.status === 202 || (response.status === 503 && retryAfter))) {
            forbidden.push(`${at} ms: ${response.status} ${body}`);
          }
        }
        await delay(20);
      }
    })();
    restartAt = Date.now();
    const restart = ok("restart server", await project.compose(["restart", "server"]));
    await waitFor("the APIs to be ready again", async () => {
      const r = await fetch(`${project.url}/readyz`).catch(() => undefined);
      await r?.body?.cancel();
      return r?.status === 200;
    }, { timeoutMs: 60_000, intervalMs: 200 });
    await delay(2_000);
    polling = false;
    await poller;
    const answers = [...seen].map(([k, n]) => `${n} × ${k}`).join(", ");
    assert.deepEqual(forbidden, [], `answers during the restart: ${answers}`);
    assert.ok((seen.get("503 Retry-After") ?? 0) > 0, `no replica was ever unready: ${answers}`);
    note(`restart of every API replica (${restart.ms} ms): ${answers}`);
  },
});

Deno.test({
  name: "under k6 load, crashed consumers and an API and a restarted Redis lose nothing accepted",
  ...options,
  async fn() {
    requireUp();
    const load = project.acceptedLoad("faults", { rate: 250, seconds: 30 });
    await delay(4_000);
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
    await project.crash(api.id);
    await delay(4_000);
    const redis = ok("restart redis", await project.compose(["restart", "redis"]));
    const outcomes = await load;
    const drainMs = await project.waitDrained();
    const rows = await project.rows("faults");
    const { report, storedAfter503 } = checkAllowing503Stored(outcomes, rows);
    const line = `faults under load (${crashes} consumer crashes, 1 API crash, redis restarted ` +
      `in ${redis.ms} ms): ${accounting(outcomes, rows.length)}, ${report.indeterminateStored} ` +
      `of the indeterminate and ${storedAfter503.length} of the 503s stored; lost ` +
      `${report.lost.length}, duplicated ${report.duplicated.length}, unexpected rows ` +
      `${report.unexpectedRows.length}; drained ${drainMs} ms after the load`;
    note(line);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
    assert.ok(report.accepted > 1_000, line);
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
    const load = project.acceptedLoad("stopped", { rate: 300, seconds: 12 });
    await delay(6_000);
    const backlog = await project.pending();
    const stop = ok("stop", await project.compose(["stop"]));
    const outcomes = await load.catch((error) => {
      throw new Error(`k6 failed while the stack stopped: ${error}`);
    });
    const stopped = await project.containers();
    const unclean = stopped.filter((c) => c.state !== "exited" || c.exitCode !== 0);
    assert.deepEqual(unclean.map((c) => `${c.name} ${c.state} ${c.exitCode}`), []);
    // 30 s is every service's stop_grace_period; a SIGKILL after it would show as exit 137.
    assert.ok(stop.ms < 35_000, `docker compose stop took ${stop.ms} ms`);
    ok("down (keeping volumes)", await project.down({ volumes: false }));
    const up = ok("up", await project.compose(["up", "-d", "--wait"]));
    const drainMs = await project.waitDrained();
    const rows = await project.rows("stopped");
    const { report, storedAfter503 } = checkAllowing503Stored(outcomes, rows);
    const line = `stop under load: ${stopped.length} containers exited 0 in ${stop.ms} ms with ` +
      `${backlog} users queued; down, up in ${up.ms} ms, drained in ${drainMs} ms: ` +
      `${accounting(outcomes, rows.length)}, ${storedAfter503.length} of the 503s stored; lost ` +
      `${report.lost.length}, duplicated ${report.duplicated.length}`;
    note(line);
    assert.ok(backlog > 0, line);
    assert.ok(deliveryHeld(report), `${describeProblems(report)}\n${line}`);
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
