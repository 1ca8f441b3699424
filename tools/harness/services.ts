/**
 * Real services for the integration tests in tests/: a Redis and a PostgreSQL
 * server on free loopback ports with their data in temp dirs, the migration,
 * and a whole native stack, each disposable (`await using`, or `close()`),
 * which removes its temp dir. The servers are the native stack's own
 * (`tools/harness/supervisor.ts`), so tests exercise the same configuration
 * compose runs: redis/redis.conf's AOF settings and project.env's credentials.
 *
 * The programs come from PATH; `./stack test` puts the tools it installed
 * first on it, and this module adds that tools dir too (STACK_TOOLS_DIR,
 * default ~/.cache/users-pipeline/tools) for a plain `deno test`.
 *
 * @module
 */

import { type PostgresEnv, PostgresServer } from "./postgres_server.ts";
import { RedisServer } from "./redis_server.ts";
import { NativeStack } from "./supervisor.ts";
import { OutputBuffer } from "./line_output.ts";
import { freePort, freePorts } from "./ports.ts";
import { TaskProcess } from "./processes.ts";
import { projectEnv, REPO_DIR, useStackTools } from "./repo.ts";

export { OutputBuffer, projectEnv, REPO_DIR, useStackTools };

/**
 * Where the test servers keep their data: memory (`/dev/shm`) when the machine has it. The tests
 * kill and restart processes, never the machine, so files in memory survive everything they do;
 * on a disk, the suite's Docker half (image builds, containers) can make an fsync take hundreds
 * of milliseconds, and Redis, whose append-only file is flushed every second, then holds its
 * writes back, which the fault tests would see as an outage nobody caused.
 */
export function serviceDirRoot(): string | undefined {
  try {
    return Deno.statSync("/dev/shm").isDirectory ? "/dev/shm" : undefined;
  } catch {
    return undefined;
  }
}

/** A temp dir that PostgreSQL's system user can reach when the tests run as root. */
async function makeServiceDir(prefix: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix, dir: serviceDirRoot() });
  await Deno.chmod(dir, 0o755);
  return dir;
}

/**
 * Runs `start` for a service whose state lives in `dir`. If it fails, removes
 * `dir` and rethrows with the service's last output; otherwise returns a
 * `close` that stops the service and removes `dir`, once however often called.
 */
async function startInDir<T>(
  dir: string,
  output: OutputBuffer,
  start: () => Promise<T>,
  stop: (started: T) => Promise<unknown>,
): Promise<{ started: T; close: () => Promise<void> }> {
  let started: T;
  try {
    started = await start();
  } catch (error) {
    await Deno.remove(dir, { recursive: true });
    throw new Error(`${error instanceof Error ? error.message : error}\n${output.tail()}`, {
      cause: error,
    });
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      await stop(started);
      await Deno.remove(dir, { recursive: true });
    })();
  return { started, close };
}

/** A disposable Redis server; see {@linkcode startRedis}. */
export interface TestRedis extends AsyncDisposable {
  /** The server: `kill()`, `freeze()`, `thaw()`, `restart()`, `exited`. */
  readonly server: RedisServer;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** Its output so far. */
  readonly output: OutputBuffer;
  /** Stops the server and removes its dir. A second call returns the first promise. */
  close(): Promise<void>;
}

/** Options of {@linkcode startRedis}. */
export interface StartRedisOptions {
  /** The config file, or null for redis-server's defaults. @default the repo's redis/redis.conf */
  configFile?: string | null;
}

/** Starts redis-server with the repo's redis.conf on a free port and a temp data dir. */
export async function startRedis(options: StartRedisOptions = {}): Promise<TestRedis> {
  useStackTools();
  const dir = await makeServiceDir("redis-");
  const output = new OutputBuffer();
  const configFile = options.configFile === undefined
    ? `${REPO_DIR}/redis/redis.conf`
    : options.configFile ?? undefined;
  const { started: server, close } = await startInDir(
    dir,
    output,
    () =>
      RedisServer.start({
        port: freePort(),
        dir,
        configFile,
        output: output.sink,
        log: output.sink.bind(null, "test"),
      }),
    (server) => server.stop(),
  );
  return {
    server,
    url: server.url,
    port: server.port,
    output,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A disposable PostgreSQL server; see {@linkcode startPostgres}. */
export interface TestPostgres extends AsyncDisposable {
  /** The server: `stop(mode)`, `start()`, `kill()`, `freeze()`, `thaw()`, `exited`. */
  readonly server: PostgresServer;
  /** PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE for the database. */
  readonly env: PostgresEnv;
  /** `postgres://…` for the database. */
  readonly url: string;
  readonly port: number;
  /** Its output so far. */
  readonly output: OutputBuffer;
  /** Stops the server and removes its data dir. A second call returns the first promise. */
  close(): Promise<void>;
}

/** Options of {@linkcode startPostgres}. */
export interface StartPostgresOptions {
  /** Extra `-c` settings. @default {} */
  settings?: Record<string, string>;
}

/**
 * Starts PostgreSQL on a free port with a fresh cluster in a temp dir, with
 * project.env's user, password and database (no schema: see {@linkcode migrate}).
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<TestPostgres> {
  useStackTools();
  const env = projectEnv();
  const dir = await makeServiceDir("postgres-");
  const output = new OutputBuffer();
  const { started: server, close } = await startInDir(
    dir,
    output,
    () =>
      PostgresServer.start({
        port: freePort(),
        dataDir: `${dir}/data`,
        user: env.POSTGRES_USER ?? "postgres",
        password: env.POSTGRES_PASSWORD ?? "postgres",
        database: env.POSTGRES_DB ?? "postgres",
        binDir: Deno.env.get("STACK_PG_BIN_DIR") || undefined,
        settings: options.settings,
        output: output.sink,
        log: output.sink.bind(null, "test"),
      }),
    (server) => server.stop("fast"),
  );
  return {
    server,
    env: server.env,
    url: server.url,
    port: server.port,
    output,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * Runs `deno task migrate` against the database `env` names and returns its
 * output.
 *
 * @throws {Error} with the output when it exits non-zero.
 */
export async function migrate(env: Readonly<Record<string, string>>): Promise<string> {
  const migration = new TaskProcess("migrate", { ...env });
  const status = await migration.status;
  const output = migration.output.join("\n");
  if (!status.success) {
    throw new Error(
      `Cannot migrate as deno task migrate exited with code ${status.code}:\n${output}`,
    );
  }
  return output;
}

/** A disposable native stack; see {@linkcode startTestStack}. */
export interface TestStack extends AsyncDisposable {
  /** The stack: `url`, `env`, `servers`, `consumers`, `redis`, `postgres`, `traefik`, `stop()`. */
  readonly stack: NativeStack;
  /** Every process's output so far. */
  readonly output: OutputBuffer;
  /** Stops the stack if running and removes its state dir. */
  close(): Promise<void>;
}

/** Options of {@linkcode startTestStack}. */
export interface StartTestStackOptions {
  /** @default 2 */
  servers?: number;
  /** @default 2 */
  consumers?: number;
  /** How long a replica gets to stop before SIGKILL. @default 30_000 */
  stopTimeoutMs?: number;
  /** Whether Prometheus runs too (compose runs it; few tests need it). @default false */
  prometheus?: boolean;
  /** Variables set over project.env's for every service (ADMIN_TOKEN, say). @default {} */
  env?: Readonly<Record<string, string>>;
}

/** Starts the whole native stack on free ports with its state in a temp dir. */
export async function startTestStack(options: StartTestStackOptions = {}): Promise<TestStack> {
  useStackTools();
  const stateDir = await makeServiceDir("stack-");
  const output = new OutputBuffer();
  const servers = options.servers ?? 2;
  const [http = 0, postgres = 0, redis = 0, prometheus = 0, ...replicas] = freePorts(
    4 + servers + (options.consumers ?? 2),
  );
  const stack = new NativeStack({
    repoDir: REPO_DIR,
    stateDir,
    projectEnv: { ...projectEnv(), ...options.env },
    ports: {
      http,
      postgres,
      redis,
      api: replicas.slice(0, servers),
      consumers: replicas.slice(servers),
      prometheus: options.prometheus ? prometheus : undefined,
    },
    postgresBinDir: Deno.env.get("STACK_PG_BIN_DIR") || undefined,
    output: output.sink,
    stopTimeoutMs: options.stopTimeoutMs,
  });
  const { close } = await startInDir(stateDir, output, () => stack.start(), () => stack.stop());
  return { stack, output, close, [Symbol.asyncDispose]: close };
}

/** Runs `test` and, if it fails, shows the stack's last output lines with the error. */
export async function withStackOutput(stack: TestStack, test: () => Promise<void>): Promise<void> {
  try {
    await test();
  } catch (error) {
    console.error(`--- last lines of the stack's output ---\n${stack.output.tail(80)}`);
    throw error;
  }
}
