/**
 * A local redis-server for the native stack and the integration tests: the
 * repo's `redis/redis.conf` (AOF, no eviction, …) with the address and data
 * dir overridden on the command line, ready once PING answers PONG (not while
 * it is still replaying the AOF and answers LOADING).
 *
 * @module
 */

import { ServiceProcess, type SupervisedOptions } from "./service_process.ts";
import { waitFor } from "./wait.ts";

/** Options of {@linkcode RedisServer.start}. */
export interface RedisServerOptions extends SupervisedOptions {
  /** The loopback port to listen on. */
  port: number;
  /** Where the AOF lives; created if missing. Restarting on the same dir reloads the data. */
  dir: string;
  /** A redis.conf to start from; the port, bind address and dir override it. @default none */
  configFile?: string;
  /** How long to wait for PONG. @default 30_000 */
  readyTimeoutMs?: number;
}

/**
 * The redis-server arguments: the config file first, because arguments after
 * it override its lines.
 */
export function redisServerArgs(
  options: Pick<RedisServerOptions, "port" | "dir" | "configFile">,
): string[] {
  return [
    ...(options.configFile === undefined ? [] : [options.configFile]),
    "--bind",
    "127.0.0.1",
    "--port",
    String(options.port),
    "--dir",
    options.dir,
  ];
}

/** How long one PING may take before the attempt counts as failed. */
const PING_TIMEOUT_MS = 1_000;
/** How often readiness is polled: fast enough that tests do not wait for nothing. */
const POLL_MS = 50;

/**
 * Sends one PING over a fresh connection and returns the first reply line
 * (`+PONG`, `-LOADING …`, `-NOAUTH …`).
 *
 * @throws when nothing listens or no reply comes within a second.
 */
export async function pingRedis(port: number, hostname = "127.0.0.1"): Promise<string> {
  const connection = await Deno.connect({ hostname, port });
  const timer = setTimeout(() => connection.close(), PING_TIMEOUT_MS);
  try {
    await connection.write(new TextEncoder().encode("*1\r\n$4\r\nPING\r\n"));
    const buffer = new Uint8Array(512);
    let reply = "";
    while (!reply.includes("\r\n")) {
      const read = await connection.read(buffer);
      if (read === null) break;
      reply += new TextDecoder().decode(buffer.subarray(0, read));
    }
    return reply.split("\r\n")[0] ?? "";
  } finally {
    clearTimeout(timer);
    try {
      connection.close();
    } catch {
      // closed by the timer
    }
  }
}

/** Whether a PING reply means the server takes commands (with or without a password). */
export function isReadyReply(reply: string): boolean {
  return reply === "+PONG" || reply.startsWith("-NOAUTH");
}

/** A redis-server process on 127.0.0.1. */
export class RedisServer implements AsyncDisposable {
  /** The port it listens on. */
  readonly port: number;
  /** Its data dir. */
  readonly dir: string;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  /** The supervised process, for restart counts and exit statuses. */
  readonly process: ServiceProcess;
  readonly #readyTimeoutMs: number;

  /** Starts redis-server and waits until it answers PONG. */
  static async start(options: RedisServerOptions): Promise<RedisServer> {
    const server = new RedisServer(options);
    await server.start();
    return server;
  }

  /** Prepares a server without starting it; {@linkcode start} starts it. */
  constructor(options: RedisServerOptions) {
    this.port = options.port;
    this.dir = options.dir;
    this.url = `redis://127.0.0.1:${options.port}`;
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
    this.process = new ServiceProcess({
      name: options.name ?? "redis",
      command: "redis-server",
      args: redisServerArgs(options),
      output: options.output,
      log: options.log,
      restart: options.restart,
    });
  }

  /** The pid while it runs. */
  get pid(): number | undefined {
    return this.process.pid;
  }

  /** Settles when the current redis-server process exits. */
  get exited(): Promise<Deno.CommandStatus> {
    return this.process.exited;
  }

  /** Starts redis-server (on the same port and dir as before) and waits for PONG. */
  async start(): Promise<void> {
    await Deno.mkdir(this.dir, { recursive: true });
    this.process.start();
    await this.ready();
  }

  /**
   * Waits until the server answers PONG.
   *
   * @throws {Error} when the process exits first or the wait times out.
   */
  async ready(timeoutMs = this.#readyTimeoutMs): Promise<void> {
    let last = "no answer";
    await waitFor(
      () => `redis on port ${this.port} to answer PONG (last reply: ${last})`,
      async () => {
        if (!this.process.running) {
          throw new Error(
            `Cannot use redis on port ${this.port} as it exited with code ${this.process.lastStatus?.code}`,
          );
        }
        try {
          last = await pingRedis(this.port);
        } catch (error) {
          last = String(error);
        }
        return isReadyReply(last);
      },
      { timeoutMs, intervalMs: POLL_MS },
    );
  }

  /**
   * Stops redis-server with SIGTERM, its clean shutdown: the AOF is flushed
   * and fsynced, so everything acknowledged is there on the next start.
   */
  stop(): Promise<Deno.CommandStatus | undefined> {
    return this.process.stop({ signal: "SIGTERM", timeoutMs: 30_000 });
  }

  /** Sends `signal` (SIGKILL unless told), as a crash would. */
  kill(signal: Deno.Signal = "SIGKILL"): void {
    this.process.kill(signal);
  }

  /** Suspends redis-server (SIGSTOP): connections stay open but nothing answers. */
  freeze(): void {
    this.process.freeze();
  }

  /** Resumes a frozen redis-server (SIGCONT). */
  thaw(): void {
    this.process.thaw();
  }

  /**
   * Starts redis-server again on the same port and dir, so it reloads the
   * AOF, after stopping it cleanly if it still runs.
   */
  async restart(): Promise<void> {
    if (this.process.running) await this.stop();
    await this.start();
  }

  /** Stops the server. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
