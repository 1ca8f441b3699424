/**
 * docs/production.md run for real: every `sh` block of the page, in order, in a fresh copy of the
 * repo's files (what `git clone` gives, with the working tree's changes), so the page and the test
 * cannot drift. Its blocks make a certificate authority, a certificate and the secrets, start the
 * production stack (compose.yaml with compose.production.yaml) and POST a user with a key over
 * HTTPS; the test then checks what the page promises: 202 with a key and the row stored, 401
 * without, no plain HTTP, TLS 1.1 refused and 1.2 taken, Redis and PostgreSQL refusing the
 * local stack's credentials, only the documented host ports listening, and compose refusing to
 * start, naming the variable, while a secret is unset.
 *
 * Only the project's name and its two host ports (HTTPS_PORT, PROMETHEUS_PORT, in the shell as the
 * page says) differ from what the page shows. Needs `docker` with the compose plugin and an engine
 * answering; without one each test fails and says why (none skips).
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort } from "@users-pipeline/harness/ports";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";
import { REPO_DIR } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
import { type CommandResult, ok, run } from "../support/compose_project.ts";

holdLoadTurnForFile("tests/deploy/compose_production_test.ts");

const options = { sanitizeOps: false, sanitizeResources: false };

/** The page's shell blocks, in order. */
const BLOCKS = [
  ...Deno.readTextFileSync(join(REPO_DIR, "docs/production.md")).matchAll(
    /^```sh\n([\s\S]*?)^```$/gm,
  ),
].map((match) => match[1]!);

/** The variables the page says compose refuses to start without. */
const SECRETS = [
  "ADMIN_TOKEN",
  "POSTGRES_PASSWORD",
  "REDIS_PASSWORD",
  "CLIENT_KEYS_FILE",
  "TLS_CERT_FILE",
  "TLS_KEY_FILE",
];

const httpsPort = freePort();
const prometheusPort = freePort();
const checkout = Deno.makeTempDirSync({ prefix: "upl-production-" });
const secrets = join(checkout, "secrets");

/** The shell the page's commands run in: the docker CLI's needs, the project's name and ports. */
const shell: Record<string, string> = {
  COMPOSE_PROJECT_NAME: `uplprod${Deno.pid}`,
  HTTPS_PORT: String(httpsPort),
  PROMETHEUS_PORT: String(prometheusPort),
};
for (const name of ["PATH", "HOME", "TMPDIR", "DOCKER_CONFIG", "DOCKER_HOST"]) {
  const value = Deno.env.get(name);
  if (value !== undefined) shell[name] = value;
}

/** A shell block of the page, run as a user would in the checkout. */
function sh(script: string): Promise<CommandResult> {
  return run("bash", ["-euo", "pipefail", "-c", script], {
    cwd: checkout,
    env: shell,
    clearEnv: true,
  });
}

/** `docker compose` on the production stack, as the page gives it (`--env-file … -f … -f …`). */
function compose(args: readonly string[], envFile = "secrets/production.env") {
  return run(
    "docker",
    [
      "compose",
      "--env-file",
      envFile,
      "-f",
      "compose.yaml",
      "-f",
      "compose.production.yaml",
      ...args,
    ],
    { cwd: checkout, env: shell, clearEnv: true },
  );
}

/** The host's listening TCP sockets: `address:port` and the pids that hold each. */
async function listening(): Promise<Map<string, number[]>> {
  const result = ok("ss", await run("ss", ["-ltnpH"]));
  const sockets = new Map<string, number[]>();
  for (const line of result.stdout.split("\n").filter((l) => l.trim() !== "")) {
    const fields = line.trim().split(/\s+/);
    const pids = [...line.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
    sockets.set(fields[3]!, pids);
  }
  return sockets;
}

/** The argument after `flag` in a process's command line. */
function argOf(pid: number, flag: string): string | undefined {
  try {
    const args = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
    const at = args.indexOf(flag);
    return at === -1 ? undefined : args[at + 1];
  } catch {
    return undefined;
  }
}

/** An HTTPS request with curl, trusting the page's CA: its status and body. */
async function curl(args: readonly string[]): Promise<{ status: number; body: string }> {
  const result = ok(
    "curl",
    await run("curl", [
      "-sS",
      "--cacert",
      join(secrets, "ca.crt"),
      "-o",
      "-",
      "-w",
      "\n%{http_code}",
      ...args,
    ]),
  );
  const at = result.stdout.lastIndexOf("\n");
  return { status: Number(result.stdout.slice(at + 1)), body: result.stdout.slice(0, at) };
}

const url = `https://localhost:${httpsPort}`;
let listeningBefore: Map<string, number[]> | undefined;
let started: Promise<void> | undefined;

/** The page's blocks up to its start command and its first request, run once. */
function startOnce(): Promise<void> {
  return started ??= (async () => {
    const engine = await run("docker", ["info", "--format", "{{.ServerVersion}}"]);
    if (engine.code !== 0) {
      throw new Error(`no Docker engine answers: ${engine.stderr.trim()}`);
    }
    // The repo's files as a clone has them, with this working tree's changes and no ignored file.
    ok(
      "copy the checkout",
      await run("bash", [
        "-c",
        `git ls-files -z --cached --others --exclude-standard | ` +
        `tar --null -T - -cf - 2>/dev/null | tar -xf - -C '${checkout}'`,
      ]),
    );
    assert.equal(BLOCKS.length, 4, "the page's blocks: secrets, start, first request, stop");
    listeningBefore = await listening();
    for (const block of BLOCKS.slice(0, 3)) ok(`docs/production.md:\n${block}`, await sh(block));
  })();
}

globalThis.addEventListener("unload", () => {
  Deno.removeSync(checkout, { recursive: true });
});

Deno.test({
  name:
    "docs/production.md's commands make the secrets, start the stack and queue a user with a key over HTTPS; without a key, 401",
  ...options,
  async fn() {
    await startOnce();
    const key = Deno.readTextFileSync(join(secrets, "client-keys")).split(" ")[1]!.trim();
    const accepted = await curl([
      "-H",
      `Authorization: Bearer ${key}`,
      "-d",
      JSON.stringify({ name: "Production 1" }),
      `${url}/users`,
    ]);
    assert.equal(accepted.status, 202, accepted.body);
    const id = JSON.parse(accepted.body).id as string;
    await waitFor("the user in the table", async () => {
      const psql = await compose([
        "exec",
        "-T",
        "database",
        "sh",
        "-c",
        `psql -At -U "$POSTGRES_USER" -d "$POSTGRES_DB" -c "select count(*) from users where id = '${id}'"`,
      ]);
      return psql.code === 0 && psql.stdout.trim() === "1";
    }, { timeoutMs: 30_000, intervalMs: 300 });
    const missing = await curl(["-d", JSON.stringify({ name: "No key" }), `${url}/users`]);
    assert.equal(missing.status, 401, missing.body);
    assert.equal(JSON.parse(missing.body).code, "key_missing");
  },
});

Deno.test({
  name: "no plain HTTP, no /metrics through Traefik, TLS 1.1 refused and TLS 1.2 taken",
  ...options,
  async fn() {
    await startOnce();
    // In clear to the HTTPS port: Traefik routes nothing (docs/production.md, "TLS").
    for (const path of ["/users", "/dashboard", "/admin/users"]) {
      const plain = ok(
        "curl http",
        await run("curl", [
          "-sS",
          "-o",
          "/dev/null",
          "-w",
          "%{http_code}",
          `http://localhost:${httpsPort}${path}`,
        ]),
      );
      assert.equal(plain.stdout, "404", `plain HTTP ${path}`);
    }
    const metrics = await curl([`${url}/metrics`]);
    assert.equal(metrics.status, 404, "GET /metrics over HTTPS");
    // The client offers TLS 1.1 (its security level lowered so that it may); the server must
    // answer with a protocol_version alert (70), not a cipher or certificate failure.
    const old = await run("openssl", [
      "s_client",
      "-connect",
      `127.0.0.1:${httpsPort}`,
      "-tls1_1",
      "-cipher",
      "DEFAULT@SECLEVEL=0",
    ], { stdin: "" });
    assert.notEqual(old.code, 0, old.stdout);
    assert.match(old.stderr, /alert protocol version|alert number 70/, old.stderr);
    const current = ok(
      "openssl s_client -tls1_2",
      await run("openssl", [
        "s_client",
        "-connect",
        `127.0.0.1:${httpsPort}`,
        "-tls1_2",
        "-CAfile",
        join(secrets, "ca.crt"),
        "-verify_return_error",
      ], { stdin: "" }),
    );
    assert.match(current.stdout, /Protocol *: TLSv1\.2/);
    assert.match(current.stdout, /Verify return code: 0 \(ok\)/);
  },
});

Deno.test({
  name: "the host listens only on the documented ports: HTTPS everywhere, Prometheus on 127.0.0.1",
  ...options,
  async fn() {
    await startOnce();
    // Other processes on this machine open and close ports too (other tests' native stacks), so
    // the diff is narrowed to what Docker publishes for this project: each published port is a
    // docker-proxy process forwarding to one of the project's containers.
    const ids = ok("compose ps", await compose(["ps", "-q"])).stdout.split("\n").filter(Boolean);
    const addresses = ok(
      "docker inspect",
      await run("docker", [
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
        ...ids,
      ]),
    ).stdout.split(/\s+/).filter(Boolean);
    const after = await listening();
    const ours = [...after].filter(([socket, pids]) =>
      !listeningBefore!.has(socket) &&
      pids.some((pid) => addresses.includes(argOf(pid, "-container-ip") ?? ""))
    ).map(([socket]) => socket).toSorted();
    const documented = (socket: string) =>
      socket.endsWith(`:${httpsPort}`) || socket === `127.0.0.1:${prometheusPort}`;
    assert.deepEqual(ours.filter((s) => !documented(s)), [], `listening: ${ours.join(" ")}`);
    assert.ok(ours.includes(`0.0.0.0:${httpsPort}`), `HTTPS on every interface: ${ours.join(" ")}`);
    assert.ok(ours.includes(`127.0.0.1:${prometheusPort}`), `Prometheus: ${ours.join(" ")}`);
    const ready = await fetch(`http://127.0.0.1:${prometheusPort}/-/ready`);
    await ready.body?.cancel();
    assert.equal(ready.status, 200, "Prometheus on the loopback");
    console.log(`the project's listening sockets: ${ours.join(", ")}`);
  },
});

Deno.test({
  name: "Redis answers nothing without its password, from inside the network",
  ...options,
  async fn() {
    await startOnce();
    const redis = ok(
      "redis-cli without a password",
      await compose([
        "exec",
        "-T",
        "redis",
        "env",
        "-u",
        "REDISCLI_AUTH",
        "redis-cli",
        "-h",
        "redis",
        "ping",
      ]),
    );
    assert.match(redis.stdout + redis.stderr, /NOAUTH/);
    const withPassword = ok(
      "redis-cli with the password",
      await compose(["exec", "-T", "redis", "redis-cli", "-h", "redis", "ping"]),
    );
    assert.equal(withPassword.stdout.trim(), "PONG");
  },
});

Deno.test({
  name: "PostgreSQL refuses compose.yaml's default password",
  ...options,
  async fn() {
    await startOnce();
    const postgres = await compose([
      "exec",
      "-T",
      "database",
      "env",
      "PGPASSWORD=password",
      "psql",
      "-h",
      "database",
      "-U",
      "username",
      "-d",
      "database",
      "-c",
      "select 1",
    ]);
    assert.notEqual(postgres.code, 0, postgres.stdout);
    assert.match(postgres.stderr, /password authentication failed/);
  },
});

Deno.test({
  name: "compose refuses to start while a secret is unset, and names it",
  ...options,
  async fn() {
    await startOnce();
    const all = Deno.readTextFileSync(join(secrets, "production.env"));
    for (const name of SECRETS) {
      const file = join(secrets, `without-${name}.env`);
      Deno.writeTextFileSync(
        file,
        all.split("\n").filter((line) => !line.startsWith(`${name}=`)).join("\n"),
      );
      const result = await compose(["up", "-d", "--wait"], file);
      assert.notEqual(result.code, 0, `up without ${name}`);
      assert.match(
        result.stderr,
        new RegExp(`required variable ${name} is missing a value: set ${name} `),
      );
    }
  },
});

Deno.test({
  name: "docs/production.md's stop command stops the stack",
  ...options,
  async fn() {
    try {
      await startOnce();
      ok("docs/production.md's stop", await sh(BLOCKS[3]!));
      const left = ok("compose ps", await compose(["ps", "-aq"])).stdout.trim();
      assert.equal(left, "", "containers left after down");
    } finally {
      await compose(["down", "-v", "--remove-orphans", "--timeout", "30"]);
    }
  },
});
