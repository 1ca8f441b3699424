/**
 * One `docker compose` project of the repo's own compose.yaml on the real Docker engine, driven
 * the way users drive it: `docker compose up`, `run`, `restart`, `stop`, `down`. Only the project
 * name (so a run never touches a user's own stack) and the published ports (`HTTP_PORT` and
 * `PROMETHEUS_PORT`, when 8000 or 9090 is taken) differ from what the README shows.
 *
 * The settings are the test's alone: compose runs with an environment holding nothing but what the
 * docker CLI needs and the test's own variables, and with `--env-file` naming a file of the test's
 * in place of the repo's untracked `.env`, so neither a developer's exported variables nor their
 * `.env` changes what a test runs.
 *
 * A crash is modelled as one: SIGKILL to the container's main process from the host, after which
 * `restart: unless-stopped` brings it back (Docker treats `docker kill` as an operator's stop and
 * would not restart it).
 *
 * @module
 */

import { type CommandResult, runCommand } from "@users-pipeline/harness/run_command";
import { freePort } from "@users-pipeline/harness/ports";
import { projectEnv } from "@users-pipeline/harness/services";
import { waitFor } from "@users-pipeline/harness/wait";
import type { Row } from "./delivery_check.ts";
import type { Outcome } from "./fault_load.ts";
import { PENDING_LISTS_SCRIPT, pendingFromReply } from "./pending_lists.ts";

/** What a finished command printed. */
export type { CommandResult };

/** A container of the project, as `docker compose ps` reports it. */
export interface ContainerState {
  readonly id: string;
  readonly service: string;
  readonly name: string;
  readonly state: string;
  readonly health: string;
  readonly exitCode: number;
}

/** One k6 request line of tests/k6/accepted-k6.js. */
interface K6Line {
  name: string;
  status: number;
  id: string | null;
  retry_after: string | null;
  error: string | null;
  /** The start of a non-202's body (absent from lines of an older script). */
  body?: string | null;
  /** A refusal's code: the API's `code`, or Traefik's X-Error-Code (`server/api_error.ts`). */
  code?: string | null;
  /** When it was sent (ms since the epoch) and how long its answer took. */
  sent_at: number;
  ms: number;
  /** k6's number for a failed request (absent from lines of an older script). */
  error_code?: number | null;
}

/** k6's error code for a request that got no answer within its own timeout. */
const K6_TIMEOUT = 1050;

/** The `error` of a JSON body (the API's refusals), else the body's text, if any. */
function errorOf(body: string | null | undefined): string | undefined {
  const text = body?.trim();
  if (!text) return undefined;
  try {
    const error = (JSON.parse(text) as { error?: unknown } | null)?.error;
    return typeof error === "string" ? error : text;
  } catch {
    return text;
  }
}

/**
 * Users not stored yet in the queue `users`, through a redis-cli that `cli` runs: the main, the
 * retry and the processing lists, counted in one atomic script (see `pending_lists.ts`).
 */
export async function pendingIn(cli: (...args: string[]) => Promise<string>): Promise<number> {
  const reply = await cli(
    "EVAL",
    PENDING_LISTS_SCRIPT,
    "2",
    "users",
    "users:retry",
    "users:processing:*",
  );
  const fields = reply.split("\n").filter((line) => line.trim() !== "");
  return [...pendingFromReply(fields).values()].reduce((a, b) => a + b, 0);
}

/** Runs a program to completion; never throws for a non-zero exit. */
export const run = runCommand;

/** Throws with the command's output unless it exited 0. */
export function ok(what: string, result: CommandResult): CommandResult {
  if (result.code !== 0) {
    throw new Error(
      `${what} exited with code ${result.code} after ${result.ms} ms:\n` +
        `${result.stdout.slice(-3_000)}\n${result.stderr.slice(-3_000)}`,
    );
  }
  return result;
}

/** POSTs one user to `url` the way the course's curl does (form content type, JSON body). */
export async function curlPost(
  url: string,
  name: string,
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
export function accounting(outcomes: readonly Outcome[], stored: number): string {
  const count = (kind: Outcome["kind"]) => outcomes.filter((o) => o.kind === kind).length;
  return `${outcomes.length} sent, ${count("accepted")} accepted, ${count("rejected")} × 503 ` +
    `with Retry-After, ${count("indeterminate")} indeterminate, ${stored} rows`;
}

/** Options of {@linkcode ComposeProject}. */
export interface ComposeProjectOptions {
  /** The host port Prometheus is published on. @default a free port */
  prometheusPort?: number;
  /**
   * The text of the settings file compose reads in place of the untracked `.env` (`KEY=VALUE`
   * lines). @default no settings
   */
  settingsFile?: string;
  /** Variables in compose's own environment, as a user's shell exports them. @default none */
  shell?: Readonly<Record<string, string>>;
}

/** What the docker CLI needs from the environment (programs, its plugins, its engine). */
function dockerCliEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "TMPDIR", "DOCKER_CONFIG", "DOCKER_HOST"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/** A compose project of compose.yaml under its own name, publishing Traefik on `port`. */
export class ComposeProject {
  readonly name: string;
  readonly port: number;
  readonly prometheusPort: number;

  readonly #settingsFile: string;
  readonly #shell: Readonly<Record<string, string>>;

  constructor(name: string, port: number, options: ComposeProjectOptions = {}) {
    this.name = name;
    this.port = port;
    this.prometheusPort = options.prometheusPort ?? freePort();
    this.#settingsFile = Deno.makeTempFileSync({ prefix: `${name}-`, suffix: ".env" });
    Deno.writeTextFileSync(this.#settingsFile, options.settingsFile ?? "");
    // compose reads it at every command, "down" included, so it stays while the test file runs.
    const file = this.#settingsFile;
    globalThis.addEventListener("unload", () => Deno.removeSync(file));
    this.#shell = options.shell ?? {};
  }

  /** Where Traefik answers on the host. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Where Prometheus's UI and HTTP API answer on the host. */
  get prometheusUrl(): string {
    return `http://127.0.0.1:${this.prometheusPort}`;
  }

  /** The published ports, as compose.yaml reads them from the environment. */
  get env(): Record<string, string> {
    return { HTTP_PORT: String(this.port), PROMETHEUS_PORT: String(this.prometheusPort) };
  }

  /**
   * `docker compose -p <name> …` with the published ports and the project's settings, as a user
   * would type it.
   */
  compose(args: readonly string[], options: { stdin?: string } = {}): Promise<CommandResult> {
    return runCommand(
      "docker",
      ["compose", "-p", this.name, "--env-file", this.#settingsFile, ...args],
      {
        env: { ...dockerCliEnv(), ...this.#shell, ...this.env },
        stdin: options.stdin,
        clearEnv: true,
      },
    );
  }

  /**
   * `./stack <args>` on this project: the name, the published ports and the settings file given
   * as compose's own variables (COMPOSE_PROJECT_NAME, COMPOSE_ENV_FILES), which every compose
   * command of the script then reads.
   */
  stack(args: readonly string[]): Promise<CommandResult> {
    return runCommand("./stack", args, { env: this.#stackEnv(), clearEnv: true });
  }

  #stackEnv(): Record<string, string> {
    return {
      ...dockerCliEnv(),
      ...this.#shell,
      ...this.env,
      COMPOSE_PROJECT_NAME: this.name,
      COMPOSE_ENV_FILES: this.#settingsFile,
    };
  }

  /** The environment compose gave a container, as `NAME=value` lines read into a record. */
  async containerEnv(containerId: string): Promise<Record<string, string>> {
    const result = ok(
      "docker inspect",
      await run("docker", [
        "inspect",
        "-f",
        "{{range .Config.Env}}{{println .}}{{end}}",
        containerId,
      ]),
    );
    return Object.fromEntries(
      result.stdout.split("\n").filter((line) => line.includes("=")).map((line) => {
        const equals = line.indexOf("=");
        return [line.slice(0, equals), line.slice(equals + 1)];
      }),
    );
  }

  /** The project's containers, stopped ones included. */
  async containers(service?: string): Promise<ContainerState[]> {
    const result = ok(
      "docker compose ps",
      await this.compose(["ps", "--all", "--format", "json", ...(service ? [service] : [])]),
    );
    // compose v2 prints one JSON object per line.
    return result.stdout.split("\n").filter((line) => line.trim() !== "").map((line) => {
      const c = JSON.parse(line);
      return {
        id: c.ID,
        service: c.Service,
        name: c.Name,
        state: c.State,
        health: c.Health ?? "",
        exitCode: c.ExitCode ?? 0,
      };
    });
  }

  /** The IP addresses of the project's API replicas, on every network they are attached to. */
  async serverAddresses(): Promise<string[]> {
    const ids = (await this.containers("server")).map((c) => c.id);
    const result = ok(
      "docker inspect",
      await run("docker", [
        "inspect",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
        ...ids,
      ]),
    );
    return result.stdout.split(/\s+/).filter((address) => address !== "");
  }

  /** SQL through psql in the database container; rows as arrays of fields. */
  async sql(query: string): Promise<string[][]> {
    const result = ok(
      `psql ${query}`,
      await this.compose([
        "exec",
        "-T",
        "database",
        "sh",
        "-c",
        'psql -v ON_ERROR_STOP=1 -At -F "\t" -U "$POSTGRES_USER" -d "$POSTGRES_DB"',
      ], { stdin: query }),
    );
    return result.stdout.split("\n").filter((line) => line !== "").map((line) => line.split("\t"));
  }

  /** The stored rows whose name starts with `prefix` and a space. */
  async rows(prefix: string): Promise<Row[]> {
    const rows = await this.sql(
      `select id, name from users where name like '${prefix.replaceAll("'", "''")} %'`,
    );
    return rows.map(([id, name]) => ({ id: id!, name: name! }));
  }

  /** A redis-cli command in the redis container. */
  async redis(...args: string[]): Promise<string> {
    return ok("redis-cli", await this.compose(["exec", "-T", "redis", "redis-cli", ...args]))
      .stdout.trim();
  }

  /** Users not stored yet: queued, awaiting retry, or held by a consumer (read atomically). */
  pending(): Promise<number> {
    return pendingIn((...args) => this.redis(...args));
  }

  /** Waits until nothing is pending and returns how long that took. */
  waitDrained(timeoutMs = 90_000): Promise<number> {
    return waitFor("the consumers to drain the queue", async () => (await this.pending()) === 0, {
      timeoutMs,
      intervalMs: 500,
    });
  }

  /**
   * SIGKILLs the main process of a container from the host: a crash, not an operator's stop.
   * Resolves with the instant of the kill (ms since the epoch).
   */
  async crash(containerId: string): Promise<number> {
    const pid = ok(
      "docker inspect",
      await run("docker", ["inspect", "-f", "{{.State.Pid}}", containerId]),
    ).stdout.trim();
    if (!/^[1-9]\d*$/.test(pid)) throw new Error(`container ${containerId} has no process: ${pid}`);
    const killedAt = Date.now();
    Deno.kill(Number(pid), "SIGKILL");
    return killedAt;
  }

  /**
   * Starts tests/k6/accepted-k6.js in the k6-tests container (`--no-deps`, so the run does not
   * rescale the services to their declared replicas), or with `fromHost` the host's k6 through
   * the published port; resolves with every request's outcome once k6 ends.
   */
  acceptedLoad(
    prefix: string,
    { rate, seconds, fromHost = false }: {
      rate: number;
      seconds: number;
      /**
       * A client outside the project, as a user's: once Traefik is gone its published port
       * refuses at once, where a client inside the network still has Traefik's address and waits
       * for its timeout on an address no longer there. @default false
       */
      fromHost?: boolean;
    },
  ): Promise<Outcome[]> {
    const load = fromHost
      ? run(
        "k6",
        acceptedK6Args("tests/k6/accepted-k6.js", { prefix, rate, seconds, baseUrl: this.url }),
      )
      : this.compose([
        "run",
        "--rm",
        "--no-deps",
        "--entrypoint=k6",
        "k6-tests",
        ...acceptedK6Args("/tests/accepted-k6.js", { prefix, rate, seconds }),
      ]);
    return load.then((result) => {
      ok("k6 run accepted-k6.js", result);
      return parseAcceptedLines(`${result.stdout}\n${result.stderr}`);
    });
  }

  /**
   * Runs `tests/k6/keyed-k6.js` through `docker compose run`: `vus` clients for `seconds`, each
   * creating users with an Idempotency-Key and retrying every non-202 with it. Resolves with
   * every user that got its 202 and the outcome of every try (k6 exits non-zero, and this
   * rejects, if any iteration did not end with a 202, its replay answered another id, or any
   * answer was one the contract does not name; with `excuseCut`, a cut connection is left to the
   * test to hold to its kill). Names start `keyed <runId> `.
   */
  async keyedLoad(
    runId: string,
    { vus, seconds, excuseCut = false }: { vus: number; seconds: number; excuseCut?: boolean },
  ): Promise<
    { users: { key: string; name: string; id: string; tries: number }[]; tries: Outcome[] }
  > {
    const env = {
      RUN_ID: runId,
      VUS: String(vus),
      DURATION: `${seconds}s`,
      LOG_KEYS: "1",
      EXCUSE_CUT: excuseCut ? "1" : "0",
    };
    const result = ok(
      "k6 run keyed-k6.js",
      await this.compose([
        "run",
        "--rm",
        "--no-deps",
        "--entrypoint=k6",
        "k6-tests",
        "run",
        "--quiet",
        "--log-format=json",
        ...Object.entries(env).flatMap(([name, value]) => ["-e", `${name}=${value}`]),
        "/tests/keyed-k6.js",
      ]),
    );
    const output = `${result.stdout}\n${result.stderr}`;
    const users = [];
    for (const line of output.split("\n")) {
      if (!line.startsWith("{")) continue;
      const record = JSON.parse(line) as { source?: string; msg?: string };
      if (record.source !== "console" || !record.msg) continue;
      const logged = JSON.parse(record.msg);
      // A try's line has a status (parseAcceptedLines reads it); a user's has its key.
      if (logged.key !== undefined) users.push(logged);
    }
    return { users, tries: parseAcceptedLines(output) };
  }

  /** `docker compose down`, with the volumes unless told to keep them. */
  async down({ volumes = true } = {}): Promise<CommandResult> {
    return ok(
      "docker compose down",
      await this.compose([
        "down",
        "--remove-orphans",
        "--timeout",
        "30",
        ...(volumes ? ["-v"] : []),
      ]),
    );
  }
}

/**
 * `docker compose up <args>` of `project`, once for the test file whose tests share it: the first
 * test that awaits the returned function brings the project up, every later one gets the same
 * result. When no engine answers or up fails, every test that needs the project fails at once
 * with the reason instead of timing out (none skips).
 */
export function upOnce(
  project: ComposeProject,
  args: readonly string[],
): () => Promise<CommandResult> {
  let up: Promise<CommandResult> | undefined;
  return () =>
    up ??= (async () => {
      const engine = await run("docker", ["info", "--format", "{{.ServerVersion}}"]);
      if (engine.code !== 0) {
        throw new Error(
          `the stack did not come up: no Docker engine answers: ${engine.stderr.trim()}`,
        );
      }
      const result = await project.compose(["up", ...args]);
      if (result.code !== 0) {
        throw new Error(
          `the stack did not come up: up exited ${result.code}:\n${result.stderr.slice(-4_000)}`,
        );
      }
      return result;
    })();
}

/**
 * The addresses Traefik's log names as targets (`targetURL=http://<address>:…`, one per failed
 * health check) that are not among `own`, its own replicas' addresses. Throws when the log names
 * no target at all: a check of where Traefik routes that saw it route nowhere would hold nothing.
 */
export function targetsOutside(log: string, own: readonly string[]): string[] {
  const targets = [...log.matchAll(/targetURL=\S*?http:\/\/([\d.]+):/g)].map((m) => m[1]!);
  if (targets.length === 0) {
    throw new RangeError("Cannot tell where Traefik routes: its log names no target");
  }
  return targets.filter((address) => !own.includes(address));
}

/**
 * docs/operations.md, "How the containers behave": through Traefik every answer comes within
 * REDIS_TIMEOUT_MS (project.env) and half a second more (the extra hop and scheduling on a busy
 * machine).
 */
export const ANSWER_THROUGH_TRAEFIK_MS = Number(projectEnv().REDIS_TIMEOUT_MS) + 500;

/**
 * The users an API replica has accepted since it started: its `users_pipeline_users_accepted_total`,
 * read from its own /metrics inside the container (the API image has deno, not curl). A counter
 * per replica says which replica answered, where the balancer's view would only say it was routed.
 */
export async function usersAcceptedBy(containerId: string): Promise<number> {
  const script = 'const r = await fetch("http://127.0.0.1:" + (Deno.env.get("PORT") ?? "8000") + ' +
    '"/metrics"); console.log(await r.text());';
  const metrics = ok(
    "read /metrics",
    await run("docker", ["exec", containerId, "deno", "eval", script]),
  ).stdout;
  const line = metrics.split("\n").find((l) => l.startsWith("users_pipeline_users_accepted_total"));
  if (line === undefined) throw new Error(`no users_accepted_total in ${containerId}'s /metrics`);
  return Number(line.split(" ").at(-1));
}

/** `k6 run` arguments for tests/k6/accepted-k6.js (at `script`), its lines as JSON. */
export function acceptedK6Args(
  script: string,
  { prefix, rate, seconds, baseUrl, freshConnections = false }: {
    prefix: string;
    rate: number;
    seconds: number;
    baseUrl?: string;
    /** Each request on a new connection, as curl makes them, instead of keep-alive. */
    freshConnections?: boolean;
  },
): string[] {
  const env = { PREFIX: prefix, RATE: String(rate), DURATION: `${seconds}s`, BASE_URL: baseUrl };
  return [
    "run",
    "--quiet",
    "--log-format=json",
    ...(freshConnections ? ["--no-connection-reuse"] : []),
    ...Object.entries(env).flatMap(([name, value]) =>
      value === undefined ? [] : ["-e", `${name}=${value}`]
    ),
    script,
  ];
}

/**
 * The outcome of each request k6 logged: a 202 with an id is accepted; a 503 with Retry-After is
 * refused as the promise allows (the API's own, or Traefik's while no replica is ready); no answer,
 * a 502 or a 504 (a replica that died with the request in hand) is indeterminate; anything else
 * (404, 500, a 4xx to a valid user) is an answer the promise forbids.
 */
export function parseAcceptedLines(output: string): Outcome[] {
  const outcomes: Outcome[] = [];
  for (const line of output.split("\n")) {
    if (!line.startsWith("{")) continue;
    let record: { msg?: string; source?: string };
    try {
      record = JSON.parse(line);
    } catch {
      continue;
    }
    if (record.source !== "console" || !record.msg) continue;
    const k6 = JSON.parse(record.msg) as K6Line;
    // keyed-k6.js also logs each user it settled, a line without a status.
    if (k6.status === undefined) continue;
    const base = {
      name: k6.name,
      url: "k6",
      status: k6.status,
      retryAfter: k6.retry_after,
      sentAt: k6.sent_at,
      ms: k6.ms,
    };
    if (k6.status === 202 && k6.id) outcomes.push({ ...base, kind: "accepted", id: k6.id });
    else if (k6.status === 503 && k6.retry_after) {
      // Its code, which checks branch on, and its text for people, as fault_load.ts records them.
      outcomes.push({
        ...base,
        kind: "rejected",
        code: k6.code ?? undefined,
        detail: errorOf(k6.body),
      });
    } else if (k6.status === 0 || k6.status === 502 || k6.status === 504) {
      outcomes.push({
        ...base,
        kind: "indeterminate",
        detail: k6.error ?? String(k6.status),
        ...(k6.error_code === K6_TIMEOUT ? { timedOut: true } : {}),
      });
    } else {
      outcomes.push({
        ...base,
        kind: "unexpected",
        detail: `${k6.status} ${k6.error ?? k6.body?.trim() ?? ""}`,
      });
    }
  }
  return outcomes;
}
