/**
 * The native stack: what compose.yaml runs, as local processes. PostgreSQL and
 * Redis first, then the migration (once, before any replica starts, so a
 * broken one stops the stack at once; each consumer would apply it too), then
 * the API replicas and the consumers, each ready once its `/readyz` answers
 * 200, then Traefik in front of the replicas, health-checking them on
 * `/readyz` every second as compose's labels have it, and Prometheus scraping
 * every replica's `/metrics` (when given a port). Every
 * process that dies without being asked to is restarted (compose's
 * `restart: unless-stopped`). {@linkcode NativeStack.stop} stops them in
 * dependency order so nothing accepted is lost: the API and the consumers
 * first (they finish or hand back what they hold), then Traefik and
 * Prometheus, then Redis
 * (a clean shutdown flushes the AOF, so what is still queued is drained on
 * the next start), then PostgreSQL.
 *
 * @module
 */

import { parse, stringify } from "yaml";
import { consoleSink, type LineSink } from "./line_output.ts";
import { freePorts, isPortFree } from "./ports.ts";
import { ServiceProcess } from "./service_process.ts";
import { waitForHttp } from "./wait.ts";
import { PostgresServer } from "./postgres_server.ts";
import { nativePrometheusConfig, targetGroups, targetsFile } from "./prometheus_config.ts";
import { RedisServer } from "./redis_server.ts";
import {
  nativeStaticConfig,
  routesConfig,
  UNAVAILABLE_ANSWER,
  unavailableConfig,
} from "./traefik_config.ts";

/** The loopback ports of one stack. */
export interface StackPorts {
  /** Traefik's `web` entry point. */
  http: number;
  /** PostgreSQL. */
  postgres: number;
  /** Redis. */
  redis: number;
  /** One per API replica; their number is the number of replicas. */
  api: readonly number[];
  /** One per consumer (its /healthz and /readyz); their number is the number of consumers. */
  consumers: readonly number[];
  /** Prometheus's UI and HTTP API; without it no Prometheus runs. */
  prometheus?: number;
}

/** Options of {@linkcode NativeStack}. */
export interface StackOptions {
  /**
   * The repo root: deno.json, project.env, redis/redis.conf, traefik/traefik.yml,
   * prometheus/prometheus.yml.
   */
  repoDir: string;
  /**
   * Where the data and the generated Traefik and Prometheus files go; created if missing. Under
   * root, PostgreSQL's system user must be able to reach it (`startTestStack` makes it so).
   */
  stateDir: string;
  /** project.env, parsed; only hosts and ports are overridden. */
  projectEnv: Readonly<Record<string, string>>;
  /** The ports; `api` and `consumers` also say how many of each run. */
  ports: StackPorts;
  /** Where PostgreSQL's programs are. @default findPostgresBinDir() */
  postgresBinDir?: string;
  /** Where every child's output lines go. @default consoleSink() */
  output?: LineSink;
  /** Where the supervisor's own messages go. @default output("stack", message) */
  log?: (message: string) => void;
  /** How long an API replica or consumer gets to stop before SIGKILL. @default 30_000 */
  stopTimeoutMs?: number;
  /** How long each process gets to become ready. @default 60_000 */
  readyTimeoutMs?: number;
}

/** What each process exited with when the stack stopped. */
export interface StackExit {
  /** Whether every process exited with code 0. */
  clean: boolean;
  /** Exit status by process name; undefined for one that was not running. */
  statuses: Record<string, Deno.CommandStatus | undefined>;
}

/**
 * The environment of the API replicas, the consumers and the migration:
 * project.env with the hosts and ports pointed at the local servers (the
 * credentials in REDIS_URL are kept).
 */
export function serviceEnv(
  projectEnv: Readonly<Record<string, string>>,
  ports: { postgres: number; redis: number },
): Record<string, string> {
  const redis = new URL(projectEnv.REDIS_URL || "redis://localhost:6379");
  redis.hostname = "127.0.0.1";
  redis.port = String(ports.redis);
  return {
    ...projectEnv,
    PGHOST: "127.0.0.1",
    PGPORT: String(ports.postgres),
    REDIS_URL: redis.href,
  };
}

/**
 * Checks that every port of the stack is distinct and free on 127.0.0.1, so
 * that a readiness check never mistakes another program (another stack's
 * PostgreSQL, say) for ours.
 *
 * @throws {RangeError} naming the first port in use or given twice.
 */
export function checkPortsFree(ports: StackPorts): void {
  const named: [string, number][] = [
    ["Traefik (http)", ports.http],
    ["PostgreSQL", ports.postgres],
    ["Redis", ports.redis],
    ...ports.api.map((port, index): [string, number] => [`server-${index + 1}`, port]),
    ...ports.consumers.map((port, index): [string, number] => [`consumer-${index + 1}`, port]),
    ...(ports.prometheus === undefined
      ? []
      : [["Prometheus", ports.prometheus] as [string, number]]),
  ];
  const seen = new Map<number, string>();
  for (const [name, port] of named) {
    const other = seen.get(port);
    if (other !== undefined) {
      throw new RangeError(
        `Cannot start the stack as ${name} and ${other} would share a port: current value is ${port}`,
      );
    }
    seen.set(port, name);
    if (!isPortFree(port)) {
      throw new RangeError(
        `Cannot start the stack as ${name}'s port is in use by another program: current value is ${port}`,
      );
    }
  }
}

async function writeFileAtomically(path: string, text: string): Promise<void> {
  await Deno.writeTextFile(`${path}.tmp`, text);
  await Deno.rename(`${path}.tmp`, path);
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

/** A native stack; {@linkcode NativeStack.start} starts it. */
export class NativeStack implements AsyncDisposable {
  /** The ports in use. */
  readonly ports: StackPorts;
  /** `http://127.0.0.1:<http port>`: Traefik, the way clients reach the API. */
  readonly url: string;
  /** The environment the API replicas and consumers get (PORT aside). */
  readonly env: Record<string, string>;
  /** The API replicas (`server-1`, …). */
  readonly servers: ServiceProcess[] = [];
  /** The consumers (`consumer-1`, …). */
  readonly consumers: ServiceProcess[] = [];
  /** The PostgreSQL server, once started. */
  postgres: PostgresServer | undefined;
  /** The Redis server, once started. */
  redis: RedisServer | undefined;
  /** Traefik, once started. */
  traefik: ServiceProcess | undefined;
  /** Prometheus, once started; never when `ports.prometheus` is undefined. */
  prometheus: ServiceProcess | undefined;
  /** `http://127.0.0.1:<prometheus port>`, or undefined when the stack runs no Prometheus. */
  readonly prometheusUrl: string | undefined;

  readonly #options: StackOptions;
  readonly #output: LineSink;
  readonly #log: (message: string) => void;
  #dataDir = "";
  #stopping: Promise<StackExit> | undefined;

  /** Prepares a stack without starting it; {@linkcode start} starts it. */
  constructor(options: StackOptions) {
    this.#options = options;
    this.ports = options.ports;
    this.url = `http://127.0.0.1:${options.ports.http}`;
    this.env = serviceEnv(options.projectEnv, options.ports);
    this.prometheusUrl = options.ports.prometheus === undefined
      ? undefined
      : `http://127.0.0.1:${options.ports.prometheus}`;
    const names = [
      "postgres",
      "traefik",
      ...(this.prometheusUrl === undefined ? [] : ["prometheus"]),
      "migrate",
      `server-${options.ports.api.length}`,
      `consumer-${options.ports.consumers.length}`,
    ];
    this.#output = options.output ?? consoleSink(Math.max(...names.map((name) => name.length)));
    this.#log = options.log ?? ((message) => this.#output("stack", message));
  }

  /** Whether {@linkcode stop} was called. */
  get stopping(): boolean {
    return this.#stopping !== undefined;
  }

  /**
   * Starts every process in order and waits until each replica is ready and
   * the API is ready through Traefik. On failure, stops what was started and
   * throws.
   */
  async start(): Promise<void> {
    const options = this.#options;
    const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
    checkPortsFree(this.ports);
    try {
      await Deno.mkdir(options.stateDir, { recursive: true });
      await this.#startDatabases(readyTimeoutMs);
      this.#checkNotStopping();
      await this.#migrate();
      this.#checkNotStopping();
      this.#startReplicas();
      const replicas = [
        ...this.servers.map((process, i) => ({ process, port: this.ports.api[i] })),
        ...this.consumers.map((process, i) => ({ process, port: this.ports.consumers[i] })),
      ];
      await Promise.all(
        replicas.map(({ process, port }) =>
          waitForHttp(`http://127.0.0.1:${port}/readyz`, {
            timeoutMs: readyTimeoutMs,
            alive: () => process.running || process.restarts > 0,
          })
        ),
      );
      this.#checkNotStopping();
      await Promise.all([this.#startTraefik(), this.#startPrometheus()]);
      await Promise.all([
        waitForHttp(`${this.url}/readyz`, {
          timeoutMs: readyTimeoutMs,
          alive: () => this.traefik?.running ?? false,
        }),
        this.prometheusUrl === undefined
          ? undefined
          : waitForHttp(`${this.prometheusUrl}/-/ready`, {
            timeoutMs: readyTimeoutMs,
            alive: () => this.prometheus?.running ?? false,
          }),
      ]);
      this.#checkNotStopping();
      this.#announce();
    } catch (error) {
      await this.stop();
      throw error;
    }
  }

  /**
   * Stops everything in dependency order and settles with each exit status.
   * A second call returns the first call's promise.
   */
  stop(): Promise<StackExit> {
    this.#stopping ??= this.#stopAll();
    return this.#stopping;
  }

  /** Stops the stack. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  #checkNotStopping(): void {
    if (this.stopping) throw new Error("Cannot finish starting the stack as it is stopping");
  }

  async #startDatabases(readyTimeoutMs: number): Promise<void> {
    const { repoDir, stateDir, projectEnv } = this.#options;
    this.#dataDir = `${stateDir}/postgres`;
    this.postgres = new PostgresServer({
      port: this.ports.postgres,
      dataDir: this.#dataDir,
      user: projectEnv.POSTGRES_USER || projectEnv.PGUSER || "postgres",
      password: projectEnv.POSTGRES_PASSWORD || projectEnv.PGPASSWORD || "",
      database: projectEnv.POSTGRES_DB || projectEnv.PGDATABASE || "postgres",
      binDir: this.#options.postgresBinDir,
      output: this.#output,
      log: this.#log,
      restart: "unless-stopped",
      readyTimeoutMs,
    });
    const configFile = `${repoDir}/redis/redis.conf`;
    this.redis = new RedisServer({
      port: this.ports.redis,
      dir: `${stateDir}/redis`,
      configFile: await exists(configFile) ? configFile : undefined,
      output: this.#output,
      log: this.#log,
      restart: "unless-stopped",
      readyTimeoutMs,
    });
    const results = await Promise.allSettled([this.postgres.start(), this.redis.start()]);
    const failure = results.find((result) => result.status === "rejected");
    if (failure) throw failure.reason;
  }

  async #migrate(): Promise<void> {
    const migrate = new ServiceProcess({
      name: "migrate",
      command: Deno.execPath(),
      args: ["task", "migrate"],
      cwd: this.#options.repoDir,
      env: this.env,
      output: this.#output,
      log: () => {},
    });
    migrate.start();
    const status = await migrate.exited;
    if (!status.success) {
      throw new Error(
        `Cannot start the stack as the migration exited with code ${status.code}; see migrate's output above`,
      );
    }
  }

  #startReplicas(): void {
    const { repoDir } = this.#options;
    const common = {
      command: Deno.execPath(),
      cwd: repoDir,
      output: this.#output,
      log: this.#log,
      restart: "unless-stopped" as const,
    };
    for (const [index, port] of this.ports.api.entries()) {
      const server = new ServiceProcess({
        ...common,
        name: `server-${index + 1}`,
        args: ["task", "server"],
        // REPLICA_ID is the `replica` label of its metrics; in a container, the hostname is.
        env: { ...this.env, PORT: String(port), REPLICA_ID: `server-${index + 1}` },
      });
      this.servers.push(server);
      server.start();
    }
    for (const [index, port] of this.ports.consumers.entries()) {
      const consumer = new ServiceProcess({
        ...common,
        name: `consumer-${index + 1}`,
        args: ["task", "consumer"],
        env: { ...this.env, PORT: String(port), REPLICA_ID: `consumer-${index + 1}` },
      });
      this.consumers.push(consumer);
      consumer.start();
    }
  }

  async #startTraefik(): Promise<void> {
    const { repoDir, stateDir } = this.#options;
    const traefikDir = `${stateDir}/traefik`;
    const dynamicDir = `${traefikDir}/dynamic`;
    await Deno.mkdir(dynamicDir, { recursive: true });
    const source = parse(await Deno.readTextFile(`${repoDir}/traefik/traefik.yml`));
    const unavailableAddress = `127.0.0.1:${this.#spareLoopbackPort()}`;
    const config = nativeStaticConfig(source, {
      address: `127.0.0.1:${this.ports.http}`,
      dynamicDir: await Deno.realPath(dynamicDir),
      unavailableAddress,
    });
    const header = (from: string) => `# Generated by tools/harness/ from ${from} on every start.\n`;
    const configFile = `${traefikDir}/traefik.yml`;
    await writeFileAtomically(configFile, header("traefik/traefik.yml") + stringify(config));
    // Before the routes, which name its service.
    const fallback = parse(await Deno.readTextFile(`${repoDir}/traefik/dynamic/unavailable.yml`));
    await writeFileAtomically(
      `${dynamicDir}/unavailable.yml`,
      header("traefik/dynamic/unavailable.yml") +
        stringify(unavailableConfig(fallback, unavailableAddress)),
    );
    const servers = this.ports.api.map((port) => `http://127.0.0.1:${port}`);
    await writeFileAtomically(
      `${dynamicDir}/routes.yml`,
      header("traefik/traefik.yml") +
        stringify(routesConfig(servers, { fallback: UNAVAILABLE_ANSWER })),
    );
    this.traefik = new ServiceProcess({
      name: "traefik",
      command: "traefik",
      args: [`--configFile=${await Deno.realPath(configFile)}`],
      cwd: traefikDir,
      output: this.#output,
      log: this.#log,
      restart: "unless-stopped",
    });
    this.traefik.start();
  }

  /**
   * A free loopback port that is none of the stack's own (one not started yet would look free):
   * of as many free ports as the stack has, plus one, at least one is not the stack's.
   */
  #spareLoopbackPort(): number {
    const { http, postgres, redis, api, consumers, prometheus } = this.ports;
    const own = new Set([http, postgres, redis, ...api, ...consumers, prometheus]);
    return freePorts(own.size + 1).find((port) => !own.has(port))!;
  }

  /**
   * Prometheus on loopback with its configuration, its targets files and its
   * data in `<stateDir>/prometheus`; the data stays, like Redis's and
   * PostgreSQL's, so a restarted stack keeps its history.
   */
  async #startPrometheus(): Promise<void> {
    const port = this.ports.prometheus;
    if (port === undefined) return;
    const { repoDir, stateDir } = this.#options;
    const prometheusDir = `${stateDir}/prometheus`;
    const targetsDir = `${prometheusDir}/targets`;
    await Deno.mkdir(targetsDir, { recursive: true });
    await Deno.mkdir(`${prometheusDir}/data`, { recursive: true });
    const absoluteTargetsDir = await Deno.realPath(targetsDir);
    const source = parse(await Deno.readTextFile(`${repoDir}/prometheus/prometheus.yml`));
    const { config, jobs } = nativePrometheusConfig(source, absoluteTargetsDir);
    // The jobs of prometheus/prometheus.yml are compose's service names.
    const replicaPorts: Record<string, readonly number[]> = {
      server: this.ports.api,
      "server-consumer": this.ports.consumers,
    };
    for (const job of jobs) {
      const ports = replicaPorts[job];
      if (ports === undefined) {
        throw new TypeError(
          `Cannot start Prometheus as a job of prometheus/prometheus.yml is not a service of the native stack: current value is ${
            JSON.stringify(job)
          }`,
        );
      }
      await writeFileAtomically(
        targetsFile(absoluteTargetsDir, job),
        JSON.stringify(targetGroups(ports), null, 2) + "\n",
      );
    }
    const header = "# Generated by tools/harness/ from prometheus/prometheus.yml on every start.\n";
    const configFile = `${prometheusDir}/prometheus.yml`;
    await writeFileAtomically(configFile, header + stringify(config));
    this.prometheus = new ServiceProcess({
      name: "prometheus",
      command: "prometheus",
      args: [
        `--config.file=${await Deno.realPath(configFile)}`,
        `--storage.tsdb.path=${await Deno.realPath(`${prometheusDir}/data`)}`,
        `--web.listen-address=127.0.0.1:${port}`,
        // Its startup and compaction notes would drown the replicas' lines; warnings still show.
        "--log.level=warn",
      ],
      cwd: prometheusDir,
      output: this.#output,
      log: this.#log,
      restart: "unless-stopped",
    });
    this.prometheus.start();
  }

  /** Where everything listens, for the output a failing test shows. */
  #announce(): void {
    const at = (ports: readonly (number | undefined)[]) =>
      ports.filter((port) => port !== undefined).map((port) => `127.0.0.1:${port}`).join(", ");
    const { postgres, redis, api, consumers, prometheus } = this.ports;
    this.#log(
      `ready at ${this.url}: API replicas ${at(api)}, consumers ${at(consumers)}, ` +
        `PostgreSQL ${at([postgres])} (data in ${this.#dataDir}), Redis ${at([redis])}` +
        (prometheus === undefined ? "" : `, Prometheus ${at([prometheus])}`),
    );
  }

  async #stopAll(): Promise<StackExit> {
    const statuses: Record<string, Deno.CommandStatus | undefined> = {};
    const stopTimeoutMs = this.#options.stopTimeoutMs ?? 30_000;
    // One failing step must not leave the later processes running.
    const step = async (name: string, stop: () => Promise<Deno.CommandStatus | undefined>) => {
      try {
        statuses[name] = await stop();
      } catch (error) {
        this.#log(`could not stop ${name}: ${error}`);
        statuses[name] = undefined;
      }
    };
    this.#log("stopping: API replicas and consumers first");
    await Promise.all(
      [...this.servers, ...this.consumers].map((process) =>
        step(process.name, () => process.stop({ signal: "SIGTERM", timeoutMs: stopTimeoutMs }))
      ),
    );
    // Prometheus last scraped the replicas as they stopped; it keeps nothing the pipeline needs.
    const [traefik, prometheus] = [this.traefik, this.prometheus];
    await Promise.all([
      traefik && step("traefik", () => traefik.stop({ signal: "SIGTERM", timeoutMs: 15_000 })),
      prometheus &&
      step("prometheus", () => prometheus.stop({ signal: "SIGTERM", timeoutMs: 15_000 })),
    ]);
    const redis = this.redis;
    if (redis) await step("redis", () => redis.stop());
    const postgres = this.postgres;
    if (postgres) await step("postgres", () => postgres.stop("fast"));
    const clean = Object.values(statuses).every((status) => status?.code === 0);
    const unclean = Object.entries(statuses).filter(([, status]) => status?.code !== 0);
    this.#log(
      clean
        ? "stopped"
        : `stopped; not cleanly: ${
          unclean.map(([name, status]) => `${name} (code ${status?.code})`).join(", ")
        }`,
    );
    return { clean, statuses };
  }
}
