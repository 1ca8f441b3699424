/**
 * Replicas behind Traefik, on the repo's compose.yaml and the Docker engine `./stack test` starts:
 * on fresh projects the first POST the moment `up --wait` returns is a 202, and each project's
 * Traefik routes only to its own replicas; a setting in the untracked settings file or the shell
 * reaches every API replica; scaled to 4 APIs and 3 consumers, every API replica gets traffic,
 * every consumer stores and Prometheus scrapes them all and counts what they stored; with
 * ADMIN_TOKEN set, the dashboard and the admin routes answer through Traefik. The tests share one
 * project (those that need another make their own) and run in file order; once they end the
 * project is taken down with its volumes.
 *
 * Needs `docker` with the compose plugin and an engine answering; without one each test fails and
 * says why (none skips).
 *
 * @module
 */

import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { waitFor } from "@users-pipeline/harness/wait";
import { checkDelivery, deliveryHeld, describeProblems } from "../support/delivery_check.ts";
import {
  accounting,
  ANSWER_THROUGH_TRAEFIK_MS,
  ComposeProject,
  curlPost,
  ok,
  run,
  targetsOutside,
  upOnce,
  usersAcceptedBy,
} from "../support/compose_project.ts";
import { storedSum, waitForStored, waitForTargets } from "../support/prometheus_api.ts";

const CHROMIUM = Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium";
const project = new ComposeProject(`upl${Deno.pid}r`, freePort());
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
holdLoadTurnForFile("tests/deploy/compose_replicas_test.ts");
// Hooks run last registered first: the project goes down while the file still holds the turn.
Deno.test.afterAll(async () => {
  console.log(`\ncompose replicas summary:\n  ${summary.join("\n  ")}`);
  await project.down();
});

Deno.test({
  name:
    "on fresh projects, the first POST the moment up --wait returns is a 202 (2 and 4 APIs), and each project's Traefik routes only to its own replicas",
  ...options,
  async fn() {
    await ready();
    const lines = [];
    for (const scale of [[], ["--scale", "server=4"]]) {
      const fresh = new ComposeProject(`upl${Deno.pid}f${scale.length}`, freePort());
      const started = Date.now();
      try {
        const up = ok("up --wait", await fresh.compose(["up", "-d", ...scale, "--wait"]));
        const first = await curlPost(fresh.url, "First on a fresh project");
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
            const answer = await curlPost(through.url, `${prefix} ${label} ${i}`);
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
  name: "scaled to 4 APIs and 3 consumers: every API replica gets traffic, every consumer stores",
  ...options,
  async fn() {
    await ready();
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
    await ready();
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
