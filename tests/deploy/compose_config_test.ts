/**
 * Checks compose.yaml, the Dockerfile and the Traefik configuration without a Docker engine:
 * the compose CLI resolves the file (`docker-compose config`), as the docker CLI does for Swarm
 * (`docker stack config`), and the assertions pin what the containers share with the native
 * processes of the test harness (the same deno tasks, hence the same entrypoints and permission
 * flags; project.env's values; the same traefik.yml and redis.conf) and how settings override
 * project.env's values.
 *
 * Needs the compose CLI as `docker-compose` on PATH, or its path in COMPOSE_BIN, and the docker
 * CLI. Run from anywhere:
 * `deno test --allow-all tests/deploy/compose_config_test.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml } from "yaml";
import { ERROR_CODE_HEADER, NO_REPLICA_READY } from "@users-pipeline/server/api_error";
import { projectEnv } from "@users-pipeline/harness/services";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const COMPOSE_BIN = Deno.env.get("COMPOSE_BIN") ?? "docker-compose";

const ALL_SERVICES = [
  "traefik",
  "server",
  "server-consumer",
  "redis",
  "database",
  "prometheus",
  "k6-tests",
];
/** The long-running services that must scale with `--scale NAME=N`. */
const REPLICATED_SERVICES = ["server", "server-consumer"];
/** The services built from this repo, which run a deno task. */
const DENO_SERVICES = ["server", "server-consumer"];

interface Port {
  target: number;
  published?: string;
  protocol?: string;
}

interface Volume {
  type: string;
  source?: string;
  target: string;
  read_only?: boolean;
}

interface Dependency {
  condition: string;
}

interface Service {
  image?: string;
  build?: { context: string; dockerfile?: string; target?: string };
  command?: string[] | null;
  entrypoint?: string[] | null;
  working_dir?: string;
  container_name?: string;
  ports?: Port[];
  volumes?: Volume[];
  environment?: Record<string, string | null>;
  labels?: Record<string, string>;
  deploy?: { replicas?: number; endpoint_mode?: string };
  depends_on?: Record<string, Dependency>;
  healthcheck?: { test?: string[] };
  restart?: string;
}

/** One `dns_sd_configs` entry of prometheus/prometheus.yml. */
interface DnsSdConfig {
  names: string[];
  type: string;
  port: number;
}

/** One `scrape_configs` entry of prometheus/prometheus.yml. */
interface ScrapeConfig {
  job_name: string;
  dns_sd_configs?: DnsSdConfig[];
}

interface ComposeConfig {
  name: string;
  services: Record<string, Service>;
}

interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * An empty settings file, given to compose in place of the repo's untracked `.env`: a developer's
 * own settings there, or exported in their shell, must not change what these checks read.
 */
const NO_SETTINGS = await Deno.makeTempFile({ prefix: "compose-config-", suffix: ".env" });
globalThis.addEventListener("unload", () => Deno.removeSync(NO_SETTINGS));

/** The environment a CLI needs to run (where programs and its plugins are), and nothing else. */
function toolEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "DOCKER_CONFIG", "DOCKER_HOST"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}

async function runProgram(
  program: string,
  args: string[],
  { env = {}, cwd = ROOT }: { env?: Record<string, string>; cwd?: string } = {},
): Promise<CommandResult> {
  const command = new Deno.Command(program, {
    args,
    cwd,
    clearEnv: true,
    env: { ...toolEnv(), ...env },
    stdout: "piped",
    stderr: "piped",
  });
  let output: Deno.CommandOutput;
  try {
    output = await command.output();
  } catch (error) {
    throw new Error(
      program === COMPOSE_BIN
        ? `Cannot run the compose CLI as ${COMPOSE_BIN}: install docker-compose on PATH or set COMPOSE_BIN`
        : `Cannot run ${program}: install it on PATH (./stack test does)`,
      { cause: error },
    );
  }
  const decoder = new TextDecoder();
  return {
    code: output.code,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
  };
}

/** The compose CLI on the repo's compose.yaml, with no settings from the shell or a `.env`. */
function runCompose(args: string[]): Promise<CommandResult> {
  return runProgram(COMPOSE_BIN, ["-f", "compose.yaml", "--env-file", NO_SETTINGS, ...args]);
}

let resolvedConfig: Promise<ComposeConfig> | undefined;

/** The file as compose resolves it (paths absolute, env_file read into `environment`). */
function loadComposeConfig(): Promise<ComposeConfig> {
  resolvedConfig ??= runCompose(["config", "--format", "json"]).then((result) => {
    assert.equal(result.code, 0, `docker-compose config failed:\n${result.stderr}`);
    return JSON.parse(result.stdout) as ComposeConfig;
  });
  return resolvedConfig;
}

async function service(name: string): Promise<Service> {
  const config = await loadComposeConfig();
  const found = config.services[name];
  assert.ok(found, `compose.yaml has no service ${name}`);
  return found;
}

/** deno.json's tasks by name, each as its command line (a task may be `{ description, command }`). */
async function denoTasks(): Promise<Record<string, string>> {
  const { tasks } = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  for (const name in tasks) tasks[name] = tasks[name].command ?? tasks[name];
  return tasks;
}

/**
 * The instructions that build a service's image: its Dockerfile target's, after those of the
 * stages it builds FROM.
 */
async function imageInstructions(name: string): Promise<string> {
  const { context, dockerfile, target } = (await service(name)).build ?? {};
  assert.ok(context && dockerfile && target, `${name} is not built from a Dockerfile target`);
  // An instruction may go on over lines ending in a backslash.
  const stages = new Map(
    (await Deno.readTextFile(join(context, dockerfile))).replace(/\\\n/g, " ")
      .split(/^(?=FROM\s)/m).map((text) => [text.match(/^FROM\s+\S+\s+AS\s+(\S+)/i)?.[1], text]),
  );
  assert.ok(stages.has(target), `${dockerfile} has no stage ${target}`);
  let instructions = "";
  for (let stage = target; stages.has(stage);) {
    instructions = stages.get(stage) + instructions;
    stage = stages.get(stage)!.match(/^FROM\s+(\S+)/)![1]!;
  }
  return instructions;
}

/** The exec-form CMD of an image's instructions, e.g. ["deno", "run", …]. */
function imageCmd(instructions: string): string[] {
  const lines = instructions.split("\n").filter((line) => /^CMD\s/.test(line));
  assert.equal(lines.length, 1, "expected exactly one CMD line");
  const cmd = JSON.parse(lines[0]!.replace(/^CMD\s+/, ""));
  assert.ok(Array.isArray(cmd), `CMD must be in exec form: ${lines[0]}`);
  return cmd;
}

/** The files after `deno install --frozen --entrypoint` in an image's instructions. */
function cachedEntrypoints(instructions: string): string[] {
  const installs = [...instructions.matchAll(/^RUN deno install --frozen --entrypoint ([^\n]+)/gm)];
  // One install, so its list is everything the image caches.
  assert.equal(installs.length, 1, "expected one `RUN deno install --frozen --entrypoint ...`");
  return installs[0]![1]!.trim().split(/\s+/);
}

/** The sources of an image's COPY lines, without a trailing slash: ["deno.json", "queue"]. */
function copiedSources(instructions: string): string[] {
  return instructions
    .split("\n")
    .filter((line) => /^COPY\s/.test(line))
    .flatMap((line) => line.trim().split(/\s+/).slice(1, -1))
    .filter((word) => !word.startsWith("--"))
    .map((source) => source.replace(/\/$/, ""));
}

/** The file each workspace export names: "@users-pipeline/queue/scripts" → /…/queue/scripts.ts. */
async function workspaceExports(): Promise<Map<string, string>> {
  const exports = new Map<string, string>();
  for (const member of JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))).workspace) {
    const manifest = JSON.parse(await Deno.readTextFile(join(ROOT, member, "deno.json")));
    for (const [path, file] of Object.entries<string>(manifest.exports ?? {})) {
      exports.set(join(manifest.name, path), join(ROOT, member, file));
    }
  }
  return exports;
}

/**
 * The top-level folders of the repo that a script needs at run time: those of every local module
 * it imports, by a relative path or a workspace member's name, followed transitively, and those
 * its task may read (`--allow-read=a,b`).
 */
async function foldersNeeded(task: string): Promise<Set<string>> {
  const exports = await workspaceExports();
  const files = new Set<string>();
  const pending = [join(ROOT, scriptOf(task))];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (files.has(file)) continue;
    files.add(file);
    const source = await Deno.readTextFile(file);
    for (const [, specifier] of source.matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)) {
      if (/^\.{1,2}\//.test(specifier!)) pending.push(join(dirname(file), specifier!));
      else if (exports.has(specifier!)) pending.push(exports.get(specifier!)!);
    }
  }
  const folders = new Set([...files].map((file) => relative(ROOT, file).split("/")[0]!));
  for (const flag of task.split(/\s+/).filter((word) => word.startsWith("--allow-read="))) {
    for (const path of flag.slice("--allow-read=".length).split(",")) {
      folders.add(path.replace(/^\.\//, "").split("/")[0]!);
    }
  }
  return folders;
}

/** The task a container command runs: ["task", "x"] and ["deno", "task", "x"] both give "x". */
function taskOf(command: string[], tasks: Record<string, string>): string {
  const task = Object.keys(tasks).find((name) =>
    tasks[name]!.split(/\s+/).join(" ") === command.join(" ")
  );
  assert.ok(task, `expected the command of a deno.json task, word for word: ${command.join(" ")}`);
  return task;
}

/** The script a deno task runs: the last .ts argument of its command line. */
function scriptOf(task: string): string {
  const scripts = task.split(/\s+/).filter((word) => word.endsWith(".ts"));
  assert.ok(scripts.length > 0, `task runs no .ts file: ${task}`);
  return scripts.at(-1)!;
}

Deno.test("compose.yaml defines the seven services", async () => {
  const config = await loadComposeConfig();
  assert.deepEqual(Object.keys(config.services).sort(), [...ALL_SERVICES].sort());
});

Deno.test("docker-compose config -q accepts compose.yaml", async () => {
  const result = await runCompose(["config", "-q"]);
  assert.equal(result.code, 0, result.stderr);
});

Deno.test(
  "server and server-consumer run 2 replicas with no container_name and no host ports, so they scale",
  async () => {
    for (const name of REPLICATED_SERVICES) {
      const replicated = await service(name);
      assert.equal(replicated.deploy?.replicas, 2, `${name} replicas`);
      assert.equal(replicated.container_name, undefined, `${name} container_name`);
      assert.deepEqual(replicated.ports ?? [], [], `${name} ports`);
    }
  },
);

Deno.test("traefik publishes port 8000 on the host", async () => {
  const traefik = await service("traefik");
  assert.ok(
    traefik.ports?.some((port) => port.target === 8000 && port.published === "8000"),
    `traefik ports: ${JSON.stringify(traefik.ports)}`,
  );
});

Deno.test(
  "traefik reads traefik/traefik.yml and its file provider directory exists in the mount",
  async () => {
    const traefik = await service("traefik");
    const mount = traefik.volumes?.find((volume) => volume.target === "/etc/traefik");
    assert.ok(mount?.source, "traefik mounts nothing at /etc/traefik");
    assert.equal(await Deno.realPath(mount.source), await Deno.realPath(join(ROOT, "traefik")));
    assert.equal(mount.read_only, true);
    assert.deepEqual(traefik.entrypoint, ["sh", "/etc/traefik/start.sh"]);
    assert.equal(traefik.environment?.TRAEFIK_CONFIG, "traefik.yml");
    assert.ok((await Deno.stat(join(ROOT, "traefik", "start.sh"))).isFile);

    const socket = traefik.volumes?.find((volume) => volume.target === "/var/run/docker.sock");
    assert.equal(socket?.read_only, true, "the docker socket must be mounted read-only");

    // Traefik reads a relative directory against its working directory, not the config file.
    const staticConfig = parseYaml(await Deno.readTextFile(join(ROOT, "traefik", "traefik.yml")));
    const directory: string = staticConfig.providers.file.directory;
    assert.equal(traefik.working_dir, "/etc/traefik");
    const inContainer = directory.startsWith("/") ? directory : join("/etc/traefik", directory);
    assert.ok(inContainer.startsWith("/etc/traefik/"), `${inContainer} is outside the mount`);
    const onHost = join(ROOT, "traefik", inContainer.slice("/etc/traefik/".length));
    assert.ok((await Deno.stat(onHost)).isDirectory, `${onHost} is not a directory`);

    assert.equal(staticConfig.entryPoints.web.address, ":8000");
    assert.equal(staticConfig.providers.docker.exposedByDefault, false);
  },
);

Deno.test(
  "traefik routes to its own project's (or stack's) replicas only, named by start.sh",
  async () => {
    const traefik = await service("traefik");
    // docker-compose config names the project after the repo's folder, as `docker compose` does.
    const project = (await loadComposeConfig()).name;
    assert.equal(traefik.environment?.TRAEFIK_COMPOSE_PROJECT, project);
    assert.equal(
      traefik.environment?.TRAEFIK_STACK_NAMESPACE,
      '{{index .Service.Labels "com.docker.stack.namespace"}}',
    );
    const startScript = await Deno.readTextFile(join(ROOT, "traefik", "start.sh"));
    for (
      const [file, provider, label, placeholder, variable] of [
        [
          "traefik.yml",
          "docker",
          "com.docker.compose.project",
          "COMPOSE_PROJECT",
          "TRAEFIK_COMPOSE_PROJECT",
        ],
        [
          "traefik-swarm.yml",
          "swarm",
          "com.docker.stack.namespace",
          "STACK_NAMESPACE",
          "TRAEFIK_STACK_NAMESPACE",
        ],
      ] as const
    ) {
      const config = parseYaml(await Deno.readTextFile(join(ROOT, "traefik", file)));
      assert.equal(
        config.providers[provider].constraints,
        `Label(\`${label}\`, \`@${placeholder}@\`)`,
        `${file}: providers.${provider}.constraints`,
      );
      assert.match(startScript, new RegExp(`^fill ${placeholder} ${variable}$`, "m"));
    }
  },
);

Deno.test("Traefik's entry point under Swarm holds a client to the bounds it has under compose", async () => {
  const [compose, swarm] = await Promise.all(
    ["traefik.yml", "traefik-swarm.yml"].map(async (file) =>
      (parseYaml(await Deno.readTextFile(join(ROOT, "traefik", file))) as {
        entryPoints: { web: Record<string, unknown> };
      }).entryPoints.web
    ),
  );
  for (const part of ["transport", "http"]) {
    assert.ok(compose![part], `traefik.yml: entryPoints.web.${part}`);
    assert.deepEqual(swarm![part], compose![part], `traefik-swarm.yml: entryPoints.web.${part}`);
  }
});

Deno.test("the server labels make Traefik's service `server` on port 8000, checked on /readyz", async () => {
  const labels = (await service("server")).labels ?? {};
  assert.equal(labels["traefik.enable"], "true");
  assert.equal(labels["traefik.http.services.server.loadbalancer.server.port"], "8000");
  assert.equal(labels["traefik.http.services.server.loadbalancer.healthcheck.path"], "/readyz");
  const routers = Object.keys(labels).filter((key) => key.startsWith("traefik.http.routers."));
  assert.deepEqual(routers, [], "the API's router lives in traefik/dynamic/api.yml");
});

for (const [dir, provider] of [["dynamic", "docker"], ["dynamic-swarm", "swarm"]]) {
  Deno.test(`traefik/${dir}/api.yml routes all but /metrics on web to server@${provider}, failing over to 503`, async () => {
    const api = parseYaml(await Deno.readTextFile(join(ROOT, "traefik", dir!, "api.yml")));
    const router = api.http.routers.api;
    // Everything but /metrics, which Prometheus scrapes on the internal network.
    assert.equal(router.rule, "PathPrefix(`/`) && !PathPrefix(`/metrics`)");
    assert.deepEqual(router.entryPoints, ["web"]);
    const failover = api.http.services[router.service].failover;
    assert.equal(failover.service, `server@${provider}`);
    const fallback = parseYaml(
      await Deno.readTextFile(join(ROOT, "traefik", dir!, "unavailable.yml")),
    );
    assert.ok(fallback.http.services[failover.fallback], `${failover.fallback} is not defined`);
    // A network-level retry only: retrying on a status could queue a user twice.
    const retry = api.http.middlewares[router.middlewares[0]].retry;
    assert.ok(retry.attempts > 1);
    assert.equal(retry.status, undefined);
  });
}

Deno.test("k6-tests mounts ./tests/k6 at /tests, targets traefik and stays idle", async () => {
  const k6 = await service("k6-tests");
  const mount = k6.volumes?.find((volume) => volume.target === "/tests");
  assert.ok(mount?.source, "k6-tests mounts nothing at /tests");
  assert.equal(await Deno.realPath(mount.source), await Deno.realPath(join(ROOT, "tests", "k6")));
  assert.equal(k6.environment?.BASE_URL, "http://traefik:8000");
  assert.notEqual(k6.entrypoint?.[0], "k6", "k6-tests must not run k6 on `docker compose up`");
  assert.ok(k6.depends_on?.traefik, "k6-tests must depend on traefik");
});

Deno.test("with nothing overriding them, the services get project.env's values as their environment", async () => {
  const expected = projectEnv();
  for (const name of [...DENO_SERVICES, "database"]) {
    const environment = (await service(name)).environment ?? {};
    const actual = Object.fromEntries(
      Object.keys(expected).map((key) => [key, environment[key]]),
    );
    assert.deepEqual(actual, expected, `${name} environment`);
  }
});

Deno.test("x-settings gives the services every variable of project.env as ${VAR:-its value}", async () => {
  // The form that lets the shell (and compose's .env) override each one, under compose and
  // `docker stack deploy` alike, with project.env's value when neither sets it.
  const raw = parseYaml(await Deno.readTextFile(join(ROOT, "compose.yaml")));
  const expected = Object.fromEntries(
    Object.entries(projectEnv()).map(([name, value]) => [name, `\${${name}:-${value}}`]),
  );
  assert.deepEqual(raw["x-settings"], expected);
});

/** The services' environments as compose resolves them in `dir`, with `env` as the shell's. */
async function resolvedEnvironments(
  dir: string,
  env: Record<string, string>,
): Promise<Record<string, Record<string, string | null>>> {
  const result = await runProgram(COMPOSE_BIN, ["config", "--format", "json"], { cwd: dir, env });
  assert.equal(result.code, 0, `docker-compose config failed:\n${result.stderr}`);
  const config = JSON.parse(result.stdout) as ComposeConfig;
  return Object.fromEntries(
    Object.entries(config.services).map(([name, s]) => [name, s.environment ?? {}]),
  );
}

Deno.test("compose takes any setting from the untracked .env, and from the shell over it", async () => {
  // A copy of compose.yaml in a folder of its own, with a .env beside it as a user would write
  // one: the repo's own .env (a developer's) stays out of it.
  const dir = await Deno.makeTempDir({ prefix: "compose-settings-" });
  try {
    await Deno.copyFile(join(ROOT, "compose.yaml"), join(dir, "compose.yaml"));
    await Deno.writeTextFile(
      join(dir, ".env"),
      "# untracked settings\nADMIN_TOKEN=from-the-env-file-0123\nQUEUE_MAX_LENGTH=7\n" +
        "POSTGRES_PASSWORD=file-secret\nPGPASSWORD=file-secret\n",
    );
    const services = await resolvedEnvironments(dir, {
      ADMIN_TOKEN: "from-the-shell-456789",
      BATCH_SIZE: "250",
    });
    const defaults = projectEnv();
    for (const name of DENO_SERVICES) {
      assert.deepEqual(services[name], {
        ...defaults,
        ADMIN_TOKEN: "from-the-shell-456789",
        QUEUE_MAX_LENGTH: "7",
        POSTGRES_PASSWORD: "file-secret",
        PGPASSWORD: "file-secret",
        BATCH_SIZE: "250",
      }, name);
    }
    assert.equal(services.database?.POSTGRES_PASSWORD, "file-secret");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("docker stack deploy takes any setting from the shell, else project.env's", async () => {
  // `docker stack config` resolves the file as `docker stack deploy` would, without a swarm.
  const result = await runProgram("docker", ["stack", "config", "-c", "compose.yaml"], {
    env: { ADMIN_TOKEN: "from-the-shell-456789", QUEUE_MAX_LENGTH: "13" },
  });
  assert.equal(result.code, 0, `docker stack config failed:\n${result.stderr}`);
  const config = parseYaml(result.stdout) as { services: Record<string, Service> };
  const expected = {
    ...projectEnv(),
    ADMIN_TOKEN: "from-the-shell-456789",
    QUEUE_MAX_LENGTH: "13",
  };
  for (const name of [...DENO_SERVICES, "database"]) {
    const environment = config.services[name]?.environment ?? {};
    // Swarm's loader quotes numbers as strings, as compose's does.
    assert.deepEqual(
      Object.fromEntries(Object.keys(expected).map((key) => [key, String(environment[key])])),
      expected,
      name,
    );
  }
});

Deno.test("no service waits on a start condition: each waits for what it needs itself", async () => {
  // Conditions (service_healthy, service_completed_successfully) make start order matter, and
  // `docker stack deploy` refuses them; the short list form only orders the first start.
  const config = await loadComposeConfig();
  for (const [name, dependent] of Object.entries(config.services)) {
    for (const [dependency, { condition }] of Object.entries(dependent.depends_on ?? {})) {
      assert.equal(condition, "service_started", `${name} → ${dependency}`);
    }
  }
});

Deno.test("the API and the consumer are healthy only when /readyz answers 200", async () => {
  for (const name of REPLICATED_SERVICES) {
    const test = (await service(name)).healthcheck?.test ?? [];
    assert.equal(test[0], "CMD", `${name} healthcheck`);
    assert.match(test.at(-1) ?? "", /\/readyz"\);\s*Deno\.exit\(r\.ok \? 0 : 1\);$/, name);
  }
  const labels = (await service("server")).labels ?? {};
  assert.equal(labels["traefik.http.services.server.loadbalancer.healthcheck.path"], "/readyz");
});

Deno.test("with no API replica ready, traefik/dynamic answers 503 with Retry-After and its code", async () => {
  const staticConfig = parseYaml(await Deno.readTextFile(join(ROOT, "traefik", "traefik.yml")));
  // Traefik 3.6 answers 500 for a kept-but-unhealthy replica when this is on (traefik#13261).
  assert.notEqual(staticConfig.providers.docker.allowEmptyServices, true);
  const fallback = parseYaml(
    await Deno.readTextFile(join(ROOT, "traefik", "dynamic", "unavailable.yml")),
  );
  const router = fallback.http.routers["no-replica-ready"];
  // Not /metrics: no router matches it on web, so Traefik answers 404 there.
  assert.equal(router.rule, "PathPrefix(`/`) && !PathPrefix(`/metrics`)");
  assert.equal(router.priority, 1);
  assert.deepEqual(router.entryPoints.sort(), ["unavailable", "web"]);
  assert.deepEqual(fallback.http.services[router.service].loadBalancer.servers, []);
  const headers = router.middlewares.map((name: string) =>
    fallback.http.middlewares[name].headers?.customResponseHeaders
  );
  assert.ok(headers.some((h: Record<string, string> | undefined) => h?.["Retry-After"] === "1"));
  // Its code, for clients that branch on codes: the body is Traefik's own text.
  assert.ok(
    headers.some((h: Record<string, string> | undefined) =>
      h?.[ERROR_CODE_HEADER] === NO_REPLICA_READY
    ),
  );
  // The failover's answer goes through Traefik's own loopback entrypoint, hence the header.
  const answer = fallback.http.services["no-replica-ready-answer"].loadBalancer.servers[0].url;
  const port = staticConfig.entryPoints.unavailable.address.split(":").at(-1);
  assert.equal(answer, `http://127.0.0.1:${port}`);
});

Deno.test("built services carry an image name, so Swarm and `docker compose push` can use them", async () => {
  for (const name of DENO_SERVICES) {
    const built = await service(name);
    assert.match(built.image ?? "", /^users-pipeline\/[a-z-]+:latest$/, `${name} image`);
  }
});

Deno.test(
  "each image's CMD and compose command run the command of a deno.json task, whose script the image caches",
  async () => {
    // Running the tasks' very commands is what gives the containers the native stack's
    // entrypoints and permission flags. Not `deno task` itself: it resolves every npm package of
    // the workspace before it starts, so it would download the tooling's packages at each start
    // (the image caches only its entrypoint's). The tasks run with --cached-only, so the image
    // build must have cached each task's script.
    const tasks = await denoTasks();
    const expectedCmd: Record<string, string> = {
      server: "server",
      "server-consumer": "consumer",
    };
    for (const name of DENO_SERVICES) {
      const built = await service(name);
      const instructions = await imageInstructions(name);
      const cmdTask = taskOf(imageCmd(instructions), tasks);
      if (name in expectedCmd) assert.equal(cmdTask, expectedCmd[name], `${name} CMD`);
      const task = built.command ? taskOf(built.command, tasks) : cmdTask;
      assert.ok(tasks[task], `${name} runs the ${task} task, which deno.json does not define`);
      assert.ok(
        cachedEntrypoints(instructions).includes(scriptOf(tasks[task])),
        `${name}'s image does not cache ${scriptOf(tasks[task])}`,
      );
    }
  },
);

Deno.test("each image copies every repo folder its tasks import from or read", async () => {
  const tasks = await denoTasks();
  for (const name of DENO_SERVICES) {
    const instructions = await imageInstructions(name);
    const task = taskOf((await service(name)).command ?? imageCmd(instructions), tasks);
    assert.ok(tasks[task], `deno.json has no task ${task}`);
    const copied = copiedSources(instructions);
    for (const folder of await foldersNeeded(tasks[task])) {
      assert.ok(
        copied.includes(folder),
        `${name}'s image does not COPY ${folder}/, which deno task ${task} needs`,
      );
    }
  }
});

Deno.test("redis runs redis/redis.conf from the path its command names", async () => {
  const redis = await service("redis");
  const confPath = redis.command?.[1];
  assert.equal(redis.command?.[0], "redis-server");
  const mount = redis.volumes?.find((volume) => volume.target === confPath);
  assert.ok(mount?.source, `nothing is mounted at ${confPath}`);
  assert.equal(
    await Deno.realPath(mount.source),
    await Deno.realPath(join(ROOT, "redis", "redis.conf")),
  );
});

Deno.test(
  "prometheus mounts prometheus/ read-only and finds every replica of both services by DNS on PORT",
  async () => {
    const prometheus = await service("prometheus");
    const mount = prometheus.volumes?.find((volume) => volume.target === "/etc/prometheus");
    assert.ok(mount?.source, "prometheus mounts nothing at /etc/prometheus");
    assert.equal(await Deno.realPath(mount.source), await Deno.realPath(join(ROOT, "prometheus")));
    assert.equal(mount.read_only, true);
    assert.ok(
      prometheus.ports?.some((port) => port.target === 9090 && port.published === "9090"),
      `prometheus ports: ${JSON.stringify(prometheus.ports)}`,
    );
    const config = parseYaml(
      await Deno.readTextFile(join(ROOT, "prometheus", "prometheus.yml")),
    );
    // A job per replicated service, named after it, asking compose's (and Swarm's) DNS for
    // every replica's address on the port the replicas listen on.
    const port = Number(projectEnv().PORT);
    const jobs = new Map<string, unknown>(
      config.scrape_configs.map((job: ScrapeConfig) => [job.job_name, job.dns_sd_configs]),
    );
    assert.deepEqual([...jobs.keys()].sort(), [...REPLICATED_SERVICES].sort());
    for (const name of REPLICATED_SERVICES) {
      const [sd] = jobs.get(name) as DnsSdConfig[];
      assert.deepEqual(jobs.get(name), [{ ...sd, names: [name], type: "A", port }], name);
      // Under Swarm the name returns every task's address only with DNS round robin.
      assert.equal((await service(name)).deploy?.endpoint_mode, "dnsrr", name);
    }
  },
);

Deno.test("promtool check config accepts prometheus/prometheus.yml", async () => {
  const output = await new Deno.Command("promtool", {
    args: ["check", "config", "prometheus/prometheus.yml"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output().catch((error) => {
    throw new Error("Cannot run promtool: install Debian's prometheus (./stack test does)", {
      cause: error,
    });
  });
  const decoder = new TextDecoder();
  assert.equal(
    output.code,
    0,
    decoder.decode(output.stdout) + decoder.decode(output.stderr),
  );
});
