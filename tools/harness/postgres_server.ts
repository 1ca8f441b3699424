/**
 * A local PostgreSQL server for the native stack and the integration tests:
 * initdb on first start (superuser and password as the postgres image sets
 * them up from POSTGRES_USER and POSTGRES_PASSWORD, password auth on
 * 127.0.0.1), the database created if missing, and the postmaster listening
 * only on loopback. PostgreSQL refuses to run as root, so under root every
 * server process runs as the `postgres` system user.
 *
 * @module
 */

import { ServiceProcess, signalProcess, type SupervisedOptions } from "./service_process.ts";
import { waitFor } from "./wait.ts";

/** The libpq variables that reach this server, as the API and the consumer read them. */
export interface PostgresEnv {
  PGHOST: string;
  PGPORT: string;
  PGUSER: string;
  PGPASSWORD: string;
  PGDATABASE: string;
  [name: string]: string;
}

/** How {@linkcode PostgresServer.stop} shuts down, as `pg_ctl stop -m`. */
export type ShutdownMode = "fast" | "immediate";

/** Options of {@linkcode PostgresServer.start}. */
export interface PostgresServerOptions extends SupervisedOptions {
  /** The loopback port to listen on. */
  port: number;
  /** The cluster's data dir; initialised on first start, reused after. */
  dataDir: string;
  /** The superuser (POSTGRES_USER). */
  user: string;
  /** The superuser's password (POSTGRES_PASSWORD). */
  password: string;
  /** The database to create if missing (POSTGRES_DB). */
  database: string;
  /** Where initdb, postgres, pg_isready and psql are. @default findPostgresBinDir() */
  binDir?: string;
  /** Extra `-c name=value` settings, over {@linkcode DEFAULT_SETTINGS}. @default {} */
  settings?: Record<string, string>;
  /** The system user to run as when the supervisor is root. @default "postgres" */
  systemUser?: string;
  /** How long to wait for the server to accept connections. @default 60_000 */
  readyTimeoutMs?: number;
}

/**
 * Settings every local server gets. max_connections is above the default 100
 * because each API replica and consumer keeps a pool of its own.
 */
export const DEFAULT_SETTINGS: Readonly<Record<string, string>> = {
  max_connections: "200",
};

/** A user's ids, as `/etc/passwd` lists them. */
export interface SystemUser {
  uid: number;
  gid: number;
}

/** Finds `name` in the text of `/etc/passwd`. */
export function parsePasswd(text: string, name: string): SystemUser | undefined {
  for (const line of text.split("\n")) {
    const [user, , uid, gid] = line.split(":");
    if (user === name && uid !== undefined && gid !== undefined) {
      return { uid: Number(uid), gid: Number(gid) };
    }
  }
  return undefined;
}

/** The processes in the output of `ps -e -o pid=,ppid=`. */
export function parsePs(text: string): { pid: number; ppid: number }[] {
  return text.split("\n").flatMap((line) => {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    return pid === undefined || ppid === undefined || Number.isNaN(pid) || Number.isNaN(ppid)
      ? []
      : [{ pid, ppid }];
  });
}

/** Every descendant of `root` among `processes`, children before grandchildren. */
export function descendantsOf(
  root: number,
  processes: readonly { pid: number; ppid: number }[],
): number[] {
  const found: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    const parent = queue.shift();
    for (const process of processes) {
      if (process.ppid === parent && !found.includes(process.pid)) {
        found.push(process.pid);
        queue.push(process.pid);
      }
    }
  }
  return found;
}

/**
 * Unix socket paths are limited to 107 bytes; past that the server listens on
 * TCP only (which is all the stack uses).
 */
const MAX_SOCKET_PATH = 100;

/** The socket dir for the server: its data dir, or none ("") when the path would be too long. */
export function socketDirFor(dataDir: string, port: number): string {
  return `${dataDir}/.s.PGSQL.${port}`.length <= MAX_SOCKET_PATH ? dataDir : "";
}

/** The postmaster's arguments. */
export function postgresArgs(options: {
  dataDir: string;
  port: number;
  settings?: Record<string, string>;
}): string[] {
  const settings = { ...DEFAULT_SETTINGS, ...options.settings };
  return [
    "-D",
    options.dataDir,
    "-p",
    String(options.port),
    "-k",
    socketDirFor(options.dataDir, options.port),
    "-c",
    "listen_addresses=127.0.0.1",
    ...Object.entries(settings).flatMap(([name, value]) => ["-c", `${name}=${value}`]),
  ];
}

/** initdb's arguments: the image's auth set-up (password on TCP, trust on the socket). */
export function initdbArgs(options: { dataDir: string; user: string; pwfile: string }): string[] {
  return [
    "--pgdata",
    options.dataDir,
    "--username",
    options.user,
    `--pwfile=${options.pwfile}`,
    "--auth-local=trust",
    "--auth-host=scram-sha-256",
    "--encoding=UTF8",
    "--locale=C",
  ];
}

/** Creates the database named by psql's `db` variable unless it exists (psql runs `\gexec`). */
export const CREATE_DATABASE_SQL = `SELECT format('CREATE DATABASE %I', :'db')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \\gexec
`;

/**
 * The bin dir of the newest PostgreSQL under `/usr/lib/postgresql` (Debian's
 * layout, where initdb is not on PATH), or "" to use PATH.
 */
export async function findPostgresBinDir(root = "/usr/lib/postgresql"): Promise<string> {
  const versions: number[] = [];
  try {
    for await (const entry of Deno.readDir(root)) {
      const version = Number(entry.name);
      if (Number.isFinite(version)) versions.push(version);
    }
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  for (const version of versions.toSorted((a, b) => b - a)) {
    const dir = `${root}/${version}/bin`;
    try {
      await Deno.stat(`${dir}/postgres`);
      return dir;
    } catch {
      // an unfinished install: try the next version
    }
  }
  return "";
}

/**
 * The user to run the server as: under root the `name` system user, since
 * PostgreSQL refuses root; otherwise the current user (undefined).
 *
 * @throws {TypeError} under root when there is no such user.
 */
export async function serverUser(name = "postgres"): Promise<SystemUser | undefined> {
  if (Deno.uid() !== 0) return undefined;
  const user = parsePasswd(await Deno.readTextFile("/etc/passwd"), name);
  if (user === undefined) {
    throw new TypeError(
      `Cannot run PostgreSQL as root or as user ${name}: current value is no such user in /etc/passwd`,
    );
  }
  return user;
}

/** Whether `user` (or the current user when undefined) passes `test <args> <path>`. */
async function userPasses(
  user: SystemUser | undefined,
  args: string[],
  path: string,
): Promise<boolean> {
  const { success } = await new Deno.Command("test", {
    args: [...args, path],
    uid: user?.uid,
    gid: user?.gid,
    stdout: "null",
    stderr: "null",
  }).output();
  return success;
}

/** Whether `user` (or the current user when undefined) can reach into `dir`. */
export function userCanSearch(dir: string, user: SystemUser | undefined): Promise<boolean> {
  return userPasses(user, ["-x"], dir);
}

/** How often readiness is polled. */
const POLL_MS = 100;

/** A PostgreSQL server on 127.0.0.1. */
export class PostgresServer implements AsyncDisposable {
  /** The port it listens on. */
  readonly port: number;
  /** Its data dir. */
  readonly dataDir: string;
  readonly #options: PostgresServerOptions;
  readonly #log: (message: string) => void;
  #process: ServiceProcess | undefined;
  #binDir: string | undefined;
  #user: SystemUser | undefined;

  /** Initialises the data dir if needed, starts the server and creates the database. */
  static async start(options: PostgresServerOptions): Promise<PostgresServer> {
    const server = new PostgresServer(options);
    await server.start();
    return server;
  }

  /** Prepares a server without starting it; {@linkcode start} starts it. */
  constructor(options: PostgresServerOptions) {
    this.port = options.port;
    this.dataDir = options.dataDir;
    this.#options = options;
    this.#log = options.log ?? console.log;
  }

  /**
   * The supervised postmaster, for restart counts and exit statuses.
   *
   * @throws {TypeError} before the first {@linkcode start}.
   */
  get process(): ServiceProcess {
    if (this.#process === undefined) {
      throw new TypeError(`Cannot use PostgreSQL on port ${this.port} as it was never started`);
    }
    return this.#process;
  }

  /** The PG* variables that connect to this server's database as the superuser. */
  get env(): PostgresEnv {
    return {
      PGHOST: "127.0.0.1",
      PGPORT: String(this.port),
      PGUSER: this.#options.user,
      PGPASSWORD: this.#options.password,
      PGDATABASE: this.#options.database,
    };
  }

  /** `postgres://user:password@127.0.0.1:port/database`. */
  get url(): string {
    const { user, password, database } = this.#options;
    return `postgres://${encodeURIComponent(user)}:${
      encodeURIComponent(password)
    }@127.0.0.1:${this.port}/${encodeURIComponent(database)}`;
  }

  /** The postmaster's pid while it runs. */
  get pid(): number | undefined {
    return this.#process?.pid;
  }

  /** Settles when the current postmaster exits. */
  get exited(): Promise<Deno.CommandStatus> {
    return this.process.exited;
  }

  /**
   * Starts the server on the same port and data dir (initialising the dir on
   * first start), waits until it accepts connections and creates the
   * database if missing.
   *
   * @throws {Error} when initdb fails or the server exits or does not get ready in time.
   */
  async start(): Promise<void> {
    if (this.#binDir === undefined) {
      this.#binDir = this.#options.binDir ?? await findPostgresBinDir();
      this.#user = await serverUser(this.#options.systemUser);
      this.#process = new ServiceProcess({
        name: this.#options.name ?? "postgres",
        command: this.#bin("postgres"),
        args: postgresArgs(this.#options),
        uid: this.#user?.uid,
        gid: this.#user?.gid,
        output: this.#options.output,
        log: this.#options.log,
        restart: this.#options.restart,
      });
    }
    await this.#initialise();
    this.process.start();
    await this.ready();
    await this.#createDatabase();
  }

  /**
   * Waits until the server accepts connections (pg_isready).
   *
   * @throws {Error} when the postmaster exits first or the wait times out.
   */
  async ready(timeoutMs = this.#options.readyTimeoutMs ?? 60_000): Promise<void> {
    await waitFor(`PostgreSQL on port ${this.port} to accept connections`, async () => {
      if (!this.process.running) {
        throw new Error(
          `Cannot use PostgreSQL on port ${this.port} as it exited with code ${this.process.lastStatus?.code}; see its output above`,
        );
      }
      const { code } = await new Deno.Command(this.#bin("pg_isready"), {
        args: ["-q", "-h", "127.0.0.1", "-p", String(this.port), "-d", "postgres", "-t", "2"],
        stdout: "null",
        stderr: "null",
      }).output();
      return code === 0;
    }, { timeoutMs, intervalMs: POLL_MS });
  }

  /**
   * Shuts down: `fast` rolls back open transactions and checkpoints (SIGINT),
   * `immediate` exits at once and recovers from the WAL on the next start
   * (SIGQUIT). Frozen processes are thawed first so they can take part.
   */
  async stop(mode: ShutdownMode = "fast"): Promise<Deno.CommandStatus | undefined> {
    if (this.#process === undefined) return undefined;
    this.thaw();
    return await this.#process.stop({
      signal: mode === "fast" ? "SIGINT" : "SIGQUIT",
      timeoutMs: 60_000,
    });
  }

  /** Sends `signal` (SIGKILL unless told) to the postmaster, as a crash would. */
  kill(signal: Deno.Signal = "SIGKILL"): void {
    this.process.kill(signal);
  }

  /**
   * Suspends the postmaster and every backend (SIGSTOP): connections stay
   * open, but no query answers, like a hung database host.
   */
  freeze(): void {
    for (const pid of this.#serverPids()) signalProcess(pid, "SIGSTOP");
  }

  /** Resumes a frozen server (SIGCONT). */
  thaw(): void {
    for (const pid of this.#serverPids()) signalProcess(pid, "SIGCONT");
  }

  /** Stops the server (fast). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop("fast");
  }

  #bin(name: string): string {
    return this.#binDir ? `${this.#binDir}/${name}` : name;
  }

  /** The postmaster first, so it forks no new backend while the others are being stopped. */
  #serverPids(): number[] {
    const postmaster = this.#process?.pid;
    if (postmaster === undefined) return [];
    // ps rather than /proc: Deno lets only --allow-all read /proc.
    const { stdout } = new Deno.Command("ps", {
      args: ["-e", "-o", "pid=,ppid="],
      stdout: "piped",
      stderr: "null",
    }).outputSync();
    const processes = parsePs(new TextDecoder().decode(stdout));
    return [postmaster, ...descendantsOf(postmaster, processes)];
  }

  async #initialise(): Promise<void> {
    const user = this.#user;
    await Deno.mkdir(this.dataDir, { recursive: true, mode: 0o700 });
    if (user) await Deno.chown(this.dataDir, user.uid, user.gid);
    if (!await userPasses(user, ["-w"], this.dataDir) || !await userCanSearch(this.dataDir, user)) {
      throw new Error(
        `Cannot use ${this.dataDir} as PostgreSQL's data dir: user ${
          this.#options.systemUser ?? "postgres"
        } cannot write it or search a parent dir`,
      );
    }
    try {
      await Deno.stat(`${this.dataDir}/PG_VERSION`);
      return;
    } catch {
      // not initialised yet
    }
    const pwfile = await Deno.makeTempFile({ prefix: "pg-password-" });
    try {
      await Deno.writeTextFile(pwfile, `${this.#options.password}\n`, { mode: 0o600 });
      if (user) await Deno.chown(pwfile, user.uid, user.gid);
      const result = await new Deno.Command(this.#bin("initdb"), {
        args: initdbArgs({ dataDir: this.dataDir, user: this.#options.user, pwfile }),
        uid: user?.uid,
        gid: user?.gid,
        stdin: "null",
      }).output();
      if (!result.success) {
        throw new Error(
          `Cannot initialise ${this.dataDir}: initdb exited with code ${result.code}: ${
            new TextDecoder().decode(result.stderr).trim()
          }`,
        );
      }
      this.#log(`${this.process.name}: initialised ${this.dataDir}`);
    } finally {
      await Deno.remove(pwfile).catch(() => {});
    }
  }

  async #createDatabase(): Promise<void> {
    const psql = new Deno.Command(this.#bin("psql"), {
      args: [
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-v",
        `db=${this.#options.database}`,
        "-h",
        "127.0.0.1",
        "-p",
        String(this.port),
        "-U",
        this.#options.user,
        "-d",
        "postgres",
      ],
      env: { PGPASSWORD: this.#options.password },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const writer = psql.stdin.getWriter();
    await writer.write(new TextEncoder().encode(CREATE_DATABASE_SQL));
    await writer.close();
    const result = await psql.output();
    if (!result.success) {
      throw new Error(
        `Cannot create database ${this.#options.database}: psql exited with code ${result.code}: ${
          new TextDecoder().decode(result.stderr).trim()
        }`,
      );
    }
  }
}
