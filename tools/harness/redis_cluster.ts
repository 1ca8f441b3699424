/**
 * A real Redis Cluster on loopback for the cluster tests: masters and their replicas as
 * redis-server processes, joined by `redis-cli --cluster create`, ready once every node says
 * `cluster_state:ok`, agrees on who serves which slot and every replica holds its master's
 * latest write. It answers the questions a failover test asks (which master serves a key, which
 * replica took its place) and causes the fault (a master SIGKILLed, its replicas cut off first if
 * asked, so that its last writes are lost), then waits until the cluster is whole again.
 *
 * Each node runs the repo's `redis/redis.conf` (AOF, noeviction…) through an `include`, plus the
 * cluster settings, in a config file of its own: {@linkcode RedisServer} overrides only the port,
 * bind address and data dir. The nodes' data lives where the other test servers' does
 * ({@linkcode serviceDirRoot}). The cluster is talked to with `redis-cli`, which
 * comes with redis-server: a fresh connection per question, so a node that was just killed
 * cannot leave a client of ours stuck reconnecting. Needs redis-server 7.0 or later
 * (`cluster-port`), which `./stack`'s install_tools.sh installs (Debian 12's 7.0).
 *
 * @module
 */

import { RedisServer } from "./redis_server.ts";
import { OutputBuffer } from "./line_output.ts";
import { freePorts } from "./ports.ts";
import { REPO_DIR, useStackTools } from "./repo.ts";
import { serviceDirRoot } from "./services.ts";
import { delay, waitFor } from "./wait.ts";

/** The number of hash slots of every Redis Cluster. */
export const CLUSTER_SLOTS = 16_384;

/** One node as a node of the cluster sees it (a line of `CLUSTER NODES`). */
export interface ClusterNodeView {
  /** The node id, 40 hex characters. */
  readonly id: string;
  /** Its client port. */
  readonly port: number;
  readonly role: "master" | "replica";
  /** A replica's master's id; undefined for a master. */
  readonly masterId: string | undefined;
  /** Whether the viewer flags it `fail` or `fail?` (a failure agreed on, or only suspected). */
  readonly failing: boolean;
  /** Whether the line is the viewer itself (`myself`). */
  readonly myself: boolean;
  /** The slot ranges it serves, inclusive: `[[0, 5460]]`. */
  readonly slots: readonly (readonly [number, number])[];
}

/**
 * Parses the reply of `CLUSTER NODES`: `<id> <ip:port@bus[,hostname]> <flags> <master>
 * <ping-sent> <pong-recv> <epoch> <link> <slot>…`, where a slot is `N` or `A-B`; slots being
 * moved (`[N->-id]`, `[N-<-id]`) are left out, a cluster we make never moves any.
 *
 * @throws {TypeError} for a line that is not such a record.
 */
export function parseClusterNodes(reply: string): ClusterNodeView[] {
  return reply.split("\n").map((line) => line.trim()).filter((line) => line !== "").map(
    (line) => {
      const [id = "", address = "", flagList = "", master = "", , , , , ...slotFields] = line
        .split(" ");
      const port = Number(address.split("@")[0]?.split(":").at(-1));
      if (!/^[0-9a-f]{40}$/.test(id) || !Number.isInteger(port) || flagList === "") {
        throw new TypeError(`Cannot parse a CLUSTER NODES line: current value is ${line}`);
      }
      const flags = flagList.split(",");
      const slots = slotFields.filter((field) => !field.startsWith("[")).map((field) => {
        const [from, to = from] = field.split("-").map(Number);
        return [from!, to!] as const;
      });
      return {
        id,
        port,
        role: flags.includes("master") ? "master" : "replica",
        masterId: master === "-" ? undefined : master,
        failing: flags.includes("fail") || flags.includes("fail?"),
        myself: flags.includes("myself"),
        slots,
      };
    },
  );
}

/** Parses an `INFO` or `CLUSTER INFO` reply (`field:value` lines, `#` headings) into a map. */
export function parseInfo(reply: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of reply.split("\n")) {
    const text = line.trim();
    const colon = text.indexOf(":");
    if (text.startsWith("#") || colon < 0) continue;
    fields.set(text.slice(0, colon), text.slice(colon + 1));
  }
  return fields;
}

/** The port of the master serving `slot` in `view`, or undefined when no master serves it. */
export function slotOwner(view: readonly ClusterNodeView[], slot: number): number | undefined {
  return view.find((node) =>
    node.role === "master" && node.slots.some(([from, to]) => from <= slot && slot <= to)
  )?.port;
}

/**
 * Who serves what in `view`, as one comparable string: `port:from-to,…` per master with slots,
 * sorted. Two nodes agree on the cluster's layout when theirs are equal.
 */
export function slotLayout(view: readonly ClusterNodeView[]): string {
  return view.filter((node) => node.role === "master" && node.slots.length > 0)
    .map((node) => `${node.port}:${node.slots.map(([a, b]) => `${a}-${b}`).join(",")}`)
    .sort().join(" ");
}

/** Options of {@linkcode clusterNodeConfig}. */
export interface ClusterNodeConfigOptions {
  /** The config file included first, or undefined for redis-server's defaults. */
  baseConfig: string | undefined;
  /** The cluster bus port. */
  busPort: number;
  /** `cluster-node-timeout`, in ms. */
  nodeTimeoutMs: number;
  /** `requirepass` and `masterauth`: clients and replicas alike log in with it. @default none */
  password?: string;
  /** With {@linkcode ClusterTls}: the node's TLS port for clients. */
  tlsPort?: number;
  /** The certificate files of every node, and TLS for the bus and replication. @default none */
  tls?: ClusterTls;
}

/** The files of a cluster's TLS: its nodes' certificate and key, and the CA clients trust. */
export interface ClusterTls {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
}

/**
 * A node's config file: the base config, then the cluster settings, which win over it. The bus
 * port is set, not left at the client port + 10000, which for a free port picked from the
 * ephemeral range may be above 65535 or taken.
 */
export function clusterNodeConfig(options: ClusterNodeConfigOptions): string {
  return [
    ...(options.baseConfig === undefined ? [] : [`include ${options.baseConfig}`]),
    "cluster-enabled yes",
    // Relative to the node's data dir (redis-server runs there), so each node has its own.
    "cluster-config-file nodes.conf",
    `cluster-port ${options.busPort}`,
    `cluster-node-timeout ${options.nodeTimeoutMs}`,
    // A replica takes over whatever the age of its last contact with the master: on a machine
    // busy enough to delay replication, the default (10 × the node timeout) could leave a slot
    // range with no master at all, and the test would measure the machine, not the failover.
    "cluster-replica-validity-factor 0",
    // The other masters' shards go on serving while one master's slots have none: with the
    // default (yes) every key is refused from the moment the nodes agree a master failed until its
    // replica is promoted. docs/scaling.md, "Redis Cluster", asks the same of deployments.
    "cluster-require-full-coverage no",
    ...(options.password === undefined
      ? []
      : [`requirepass ${options.password}`, `masterauth ${options.password}`]),
    // The plain port stays for the harness's questions; the nodes talk to each other over TLS and
    // announce their TLS ports to clients connected over TLS.
    ...(options.tls === undefined ? [] : [
      `tls-port ${options.tlsPort}`,
      `tls-cert-file ${options.tls.certFile}`,
      `tls-key-file ${options.tls.keyFile}`,
      `tls-ca-cert-file ${options.tls.caFile}`,
      "tls-auth-clients no",
      "tls-cluster yes",
      "tls-replication yes",
    ]),
    "",
  ].join("\n");
}

/** One redis-server of the cluster. */
export interface ClusterNode {
  /** `node-1`…: its name in the output. */
  readonly name: string;
  /** Its client port on 127.0.0.1. */
  readonly port: number;
  /** `127.0.0.1:<port>`, as REDIS_CLUSTER_NODES lists it. */
  readonly address: string;
  /** Its TLS port on 127.0.0.1, in a cluster started with `tls`. */
  readonly tlsPort: number | undefined;
  /** The process: `kill()`, `start()`, `pid`, `exited`. */
  readonly server: RedisServer;
}

/** What {@linkcode RedisCluster.killMaster} did. */
export interface Failover {
  /** The replica that took the master's place. */
  readonly promoted: ClusterNode;
  /** From the kill until the cluster was whole again, in ms. */
  readonly ms: number;
  /** When the replicas were cut off (ms since the epoch), with `replicaLagMs`. */
  readonly cutAt: number | undefined;
  /** When the SIGKILL was sent (ms since the epoch). */
  readonly killedAt: number;
}

/** Options of {@linkcode RedisCluster.start}. */
export interface RedisClusterOptions {
  /** @default 3 */
  masters?: number;
  /** Replicas of each master. @default 1 */
  replicasPerMaster?: number;
  /**
   * `cluster-node-timeout`: how long a master may be unreachable before its replica takes over.
   * Short, so a failover fits in a test. @default 1_000
   */
  nodeTimeoutMs?: number;
  /** The base config, or null for redis-server's defaults. @default the repo's redis/redis.conf */
  configFile?: string | null;
  /** How long to wait for the cluster to form (and to heal after a failover). @default 60_000 */
  readyTimeoutMs?: number;
  /**
   * Every node's password (`requirepass`, and `masterauth` for its replication), which the
   * harness's own questions then give. @default none
   */
  password?: string;
  /** TLS on every node besides its plain port: see {@linkcode ClusterNodeConfigOptions.tls}. */
  tls?: ClusterTls;
}

/** How long one `redis-cli` question may take before it counts as unanswered. */
const CLI_TIMEOUT_MS = 5_000;

/**
 * Runs `redis-cli -p <port> <args>` and returns its output. Raw output (`--no-raw` off): replies
 * are printed as they are, one element per line.
 *
 * @throws {Error} with its output when it exits non-zero or says `ERR`.
 */
export async function redisCli(port: number, ...args: string[]): Promise<string> {
  return await runRedisCli(port, args);
}

/**
 * Sends `commands` over one connection (redis-cli reading them from its stdin) and returns the
 * output, one line per simple reply: what `WAIT` needs, as it counts the replicas that hold the
 * writes of its own connection. Arguments must not need quoting.
 *
 * @throws {Error} with its output when it exits non-zero or a reply is an error.
 */
export async function redisCliSession(port: number, commands: string[][]): Promise<string> {
  return await runRedisCli(port, [], commands.map((command) => command.join(" ")).join("\n"));
}

async function runRedisCli(
  port: number,
  args: string[],
  input?: string,
  timeoutMs = CLI_TIMEOUT_MS,
  password?: string,
): Promise<string> {
  const child = new Deno.Command("redis-cli", {
    args: ["-h", "127.0.0.1", "-p", String(port), "-e", ...args],
    // From the environment rather than -a, which redis-cli warns about.
    env: password === undefined ? {} : { REDISCLI_AUTH: password },
    stdin: input === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).spawn();
  if (input !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(`${input}\n`));
    await writer.close();
  }
  const { code, stdout, stderr } = await child.output();
  const out = new TextDecoder().decode(stdout);
  if (code !== 0) {
    const err = new TextDecoder().decode(stderr);
    const what = input === undefined ? args.join(" ") : input.replaceAll("\n", "; ");
    throw new Error(
      `Cannot run redis-cli ${what} on port ${port} as it exited ${code}: ${(out + err).trim()}`,
    );
  }
  return out;
}

/** A Redis Cluster of redis-server processes on loopback; see the module doc. */
export class RedisCluster implements AsyncDisposable {
  /** Every node, masters and replicas, in the order they were created. */
  readonly nodes: readonly ClusterNode[];
  /** Every node's output, and the cluster's own messages. */
  readonly output: OutputBuffer;
  /** The dir holding every node's config and data. */
  readonly dir: string;
  readonly #readyTimeoutMs: number;
  readonly #password: string | undefined;
  /** Keys by their slot, spread over every master's slots: see {@linkcode #unhealthy}. */
  #probeKeys = new Map<number, string>();
  #closing: Promise<void> | undefined;

  private constructor(
    nodes: ClusterNode[],
    output: OutputBuffer,
    dir: string,
    readyTimeoutMs: number,
    password: string | undefined,
  ) {
    this.nodes = nodes;
    this.output = output;
    this.dir = dir;
    this.#readyTimeoutMs = readyTimeoutMs;
    this.#password = password;
  }

  /**
   * Starts the nodes, creates the cluster (`--cluster-replicas`) and waits until it is whole
   * ({@linkcode waitHealthy}). On failure, stops what it started and throws with the last output.
   */
  static async start(options: RedisClusterOptions = {}): Promise<RedisCluster> {
    useStackTools();
    const {
      masters = 3,
      replicasPerMaster = 1,
      nodeTimeoutMs = 1_000,
      readyTimeoutMs = 60_000,
    } = options;
    const baseConfig = options.configFile === undefined
      ? `${REPO_DIR}/redis/redis.conf`
      : options.configFile ?? undefined;
    const count = masters * (1 + replicasPerMaster);
    const dir = await Deno.makeTempDir({
      prefix: `redis-cluster-${Deno.pid}-`,
      dir: serviceDirRoot(),
    });
    const output = new OutputBuffer();
    const ports = freePorts(3 * count);
    const nodes: ClusterNode[] = [];
    for (let i = 0; i < count; i++) {
      const port = ports[i]!;
      const name = `node-${i + 1}`;
      const configFile = `${dir}/${name}.conf`;
      await Deno.writeTextFile(
        configFile,
        clusterNodeConfig({
          baseConfig,
          busPort: ports[count + i]!,
          nodeTimeoutMs,
          password: options.password,
          tls: options.tls,
          tlsPort: ports[2 * count + i],
        }),
      );
      const server = new RedisServer({
        name: `${name}:${port}`,
        port,
        dir: `${dir}/${name}`,
        configFile,
        output: output.sink,
        log: output.sink.bind(null, "cluster"),
      });
      const tlsPort = options.tls === undefined ? undefined : ports[2 * count + i];
      nodes.push({ name, port, address: `127.0.0.1:${port}`, tlsPort, server });
    }
    const cluster = new RedisCluster(nodes, output, dir, readyTimeoutMs, options.password);
    try {
      await Promise.all(nodes.map((node) => node.server.start()));
      // It waits for the nodes to join, which a busy machine can make take a while.
      const created = await runRedisCli(
        nodes[0]!.port,
        [
          "--cluster",
          "create",
          ...nodes.map((node) => node.address),
          "--cluster-replicas",
          String(replicasPerMaster),
          "--cluster-yes",
        ],
        undefined,
        readyTimeoutMs,
        options.password,
      );
      for (const line of created.split("\n")) output.sink("cluster-create", line);
      await cluster.#findProbeKeys(masters);
      await cluster.waitHealthy();
    } catch (error) {
      await cluster.close();
      throw new Error(
        `Cannot start a Redis Cluster: ${
          error instanceof Error ? error.message : error
        }\n${output.tail()}`,
        { cause: error },
      );
    }
    return cluster;
  }

  /** {@linkcode redisCli} on `port`, logged in with the cluster's password if it has one. */
  async cli(port: number, ...args: string[]): Promise<string> {
    return await runRedisCli(port, args, undefined, CLI_TIMEOUT_MS, this.#password);
  }

  /** {@linkcode redisCliSession} on `port`, logged in with the cluster's password if it has one. */
  async cliSession(port: number, commands: string[][]): Promise<string> {
    const input = commands.map((command) => command.join(" ")).join("\n");
    return await runRedisCli(port, [], input, CLI_TIMEOUT_MS, this.#password);
  }

  /** The nodes whose process runs now. */
  get running(): ClusterNode[] {
    return this.nodes.filter((node) => node.server.process.running);
  }

  /** Every node's TLS address, `rediss://127.0.0.1:<port>,…`, in a cluster started with `tls`. */
  get tlsSeeds(): string {
    return this.nodes.map((node) => `rediss://127.0.0.1:${node.tlsPort}`).join(",");
  }

  /** Every node's address, comma-separated: the value of REDIS_CLUSTER_NODES. */
  get seeds(): string {
    return this.nodes.map((node) => node.address).join(",");
  }

  /** The node listening on `port`. @throws {RangeError} when none of ours does. */
  node(port: number): ClusterNode {
    const node = this.nodes.find((n) => n.port === port);
    if (node === undefined) {
      throw new RangeError(`Cannot find a node of the cluster as port ${port} is none of theirs`);
    }
    return node;
  }

  /** The cluster as `node` (the first running one unless told) sees it. */
  async view(node: ClusterNode = this.#anyRunning()): Promise<ClusterNodeView[]> {
    return parseClusterNodes(await this.cli(node.port, "CLUSTER", "NODES"));
  }

  /** The hash slot of `key` (`CLUSTER KEYSLOT`, as the server computes it). */
  async keySlot(key: string): Promise<number> {
    return Number((await this.cli(this.#anyRunning().port, "CLUSTER", "KEYSLOT", key)).trim());
  }

  /** The master serving `key` now. @throws {Error} when no master serves its slot. */
  async masterOf(key: string): Promise<ClusterNode> {
    const slot = await this.keySlot(key);
    const port = slotOwner(await this.view(), slot);
    if (port === undefined) {
      throw new Error(`Cannot find the master of ${key}: slot ${slot} has none`);
    }
    return this.node(port);
  }

  /** The masters serving slots now, by the view of the first running node. */
  async masters(): Promise<ClusterNode[]> {
    return (await this.view())
      .filter((node) => node.role === "master" && node.slots.length > 0 && !node.failing)
      .map((node) => this.node(node.port));
  }

  /** The replicas of `master` now. */
  async replicasOf(master: ClusterNode): Promise<ClusterNode[]> {
    const view = await this.view();
    const id = view.find((node) => node.port === master.port)?.id;
    return view.filter((node) => node.role === "replica" && node.masterId === id)
      .map((node) => this.node(node.port));
  }

  /**
   * Waits until the cluster is whole: every running node says `cluster_state:ok` with all slots
   * served, knows every node, sees no running node as failing and agrees with the others on who
   * serves which slot (a master that is running) and sees no running master without slots (a
   * demoted master not yet known as a replica); every running replica has finished its sync
   * and holds its master's latest write. Returns the ms it took.
   */
  async waitHealthy(timeoutMs = this.#readyTimeoutMs): Promise<number> {
    let last = "nothing checked yet";
    return await waitFor(
      () => `the Redis Cluster to be whole (last seen: ${last})`,
      async () => {
        try {
          last = await this.#unhealthy();
        } catch (error) {
          last = error instanceof Error ? error.message : String(error);
        }
        return last === "";
      },
      { timeoutMs, intervalMs: 100 },
    );
  }

  /**
   * SIGKILLs `master` (as a crash would) and waits until one of its replicas was promoted in its
   * place and the cluster is whole again; says which, when, and how long that took.
   *
   * With `replicaLagMs`, the replicas fall behind first: they are frozen (SIGSTOP) and the master
   * drops their links (`CLIENT KILL TYPE replica`), then the master goes on alone for that long
   * before it dies, and the replicas are thawed after. What it wrote meanwhile never reaches the
   * replica that takes over: the window of asynchronous replication, held open on purpose (on
   * loopback a replica is otherwise at most microseconds behind). What was already sent before
   * the cut still arrives: the frozen replica reads it from its socket when thawed.
   *
   * @throws {TypeError} when `master` serves no slots or has no replica.
   */
  async killMaster(
    master: ClusterNode,
    { replicaLagMs = 0 }: { replicaLagMs?: number } = {},
  ): Promise<Failover> {
    const view = await this.view();
    const before = view.find((node) => node.port === master.port);
    if (before?.role !== "master" || before.slots.length === 0) {
      throw new TypeError(`Cannot fail over ${master.name} as it serves no slots`);
    }
    const replicas = view.filter((node) => node.masterId === before.id)
      .map((node) => this.node(node.port));
    if (replicas.length === 0) {
      throw new TypeError(`Cannot fail over ${master.name} as it has no replica`);
    }
    const slot = before.slots[0]![0];
    let cutAt: number | undefined;
    let killedAt: number;
    try {
      if (replicaLagMs > 0) {
        for (const replica of replicas) replica.server.freeze();
        await this.cli(master.port, "CLIENT", "KILL", "TYPE", "replica");
        cutAt = Date.now();
        await delay(replicaLagMs);
      }
      killedAt = Date.now();
      master.server.kill("SIGKILL");
      await master.server.exited;
    } finally {
      for (const replica of replicas) replica.server.thaw();
    }
    let promoted: ClusterNode | undefined;
    await waitFor(`a replica of ${master.name} to serve slot ${slot}`, async () => {
      try {
        const owner = slotOwner(await this.view(), slot);
        promoted = replicas.find((replica) => replica.port === owner);
      } catch {
        // a node busy or restarting: ask again
      }
      return promoted !== undefined;
    }, { timeoutMs: this.#readyTimeoutMs, intervalMs: 100 });
    await this.waitHealthy();
    return { promoted: promoted!, ms: Date.now() - killedAt, cutAt, killedAt };
  }

  /**
   * A planned failover: `CLUSTER FAILOVER` on a replica of `master`, which takes its place once
   * it has caught up (no write is lost), the old master staying up as its replica. Waits until
   * the cluster is whole; returns the promoted node and the ms that took.
   *
   * @throws {TypeError} when `master` has no replica.
   */
  async handOver(master: ClusterNode): Promise<{ promoted: ClusterNode; ms: number }> {
    const [replica] = await this.replicasOf(master);
    if (replica === undefined) {
      throw new TypeError(`Cannot hand ${master.name} over as it has no replica`);
    }
    const slot = (await this.view()).find((node) => node.port === master.port)?.slots[0]?.[0];
    const startedAt = Date.now();
    await this.cli(replica.port, "CLUSTER", "FAILOVER");
    await waitFor(`${replica.name} to take over from ${master.name}`, async () => {
      try {
        return slotOwner(await this.view(), slot ?? 0) === replica.port;
      } catch {
        return false;
      }
    }, { timeoutMs: this.#readyTimeoutMs, intervalMs: 100 });
    await this.waitHealthy();
    return { promoted: replica, ms: Date.now() - startedAt };
  }

  /**
   * Starts a node that was killed again on its data dir; a former master comes back as a
   * replica of the node that took its place. Waits until the cluster is whole.
   */
  async restart(node: ClusterNode): Promise<void> {
    await node.server.start();
    await this.waitHealthy();
  }

  /** Stops every node (SIGTERM, its clean shutdown) and removes the data; once, however called. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await Promise.allSettled(this.nodes.map((node) => node.server.stop()));
      await Deno.remove(this.dir, { recursive: true });
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #anyRunning(): ClusterNode {
    const node = this.running[0];
    if (node === undefined) throw new Error("Cannot ask the Redis Cluster as no node runs");
    return node;
  }

  /** Enough probe keys that every master's slots hold a few, with their slots. */
  async #findProbeKeys(masters: number): Promise<void> {
    const keys = Array.from({ length: 64 * masters }, (_, i) => `redis-cluster-probe:${i}`);
    const slots = (await this.cliSession(
      this.nodes[0]!.port,
      keys.map((key) => ["CLUSTER", "KEYSLOT", key]),
    )).trim().split("\n").map(Number);
    keys.forEach((key, i) => this.#probeKeys.set(slots[i]!, key));
  }

  /**
   * Whether each replica of `master` in `view` holds a write made now: a probe key written and
   * `WAIT`ed for on one connection. A replica that just loaded its master's snapshot gets the
   * writes that follow only once its first acknowledgement reached the master, so a link "up"
   * alone would let a test's first write be lost with the master, or be counted by a WAIT.
   */
  async #replicasFollow(view: readonly ClusterNodeView[], master: ClusterNodeView) {
    const replicas = view.filter((node) => node.masterId === master.id && !node.failing).length;
    const key = [...this.#probeKeys].find(([slot]) =>
      master.slots.some(([from, to]) => from <= slot && slot <= to)
    )?.[1];
    if (key === undefined) throw new Error(`no probe key in the slots of port ${master.port}`);
    const reply = await this.cliSession(master.port, [
      ["SET", key, String(Date.now())],
      ["WAIT", String(replicas), "1000"],
    ]);
    return reply.trim().split("\n").at(-1) === String(replicas);
  }

  /** What keeps the cluster from being whole, or "" when it is. */
  async #unhealthy(): Promise<string> {
    const running = this.running;
    const ports = new Set(running.map((node) => node.port));
    const layouts = new Set<string>();
    for (const node of running) {
      const info = parseInfo(await this.cli(node.port, "CLUSTER", "INFO"));
      if (info.get("cluster_state") !== "ok") return `${node.name}: cluster_state not ok`;
      if (info.get("cluster_slots_ok") !== String(CLUSTER_SLOTS)) {
        return `${node.name}: ${info.get("cluster_slots_ok")} slots ok`;
      }
      if (info.get("cluster_known_nodes") !== String(this.nodes.length)) {
        return `${node.name} knows ${info.get("cluster_known_nodes")} nodes`;
      }
      const view = await this.view(node);
      const suspect = view.find((other) => other.failing && ports.has(other.port));
      if (suspect !== undefined) return `${node.name} sees port ${suspect.port} failing`;
      const owners = view.filter((other) => other.role === "master" && other.slots.length > 0);
      const gone = owners.find((owner) => !ports.has(owner.port));
      if (gone !== undefined) return `${node.name} sees stopped port ${gone.port} serve slots`;
      // A master that handed its slots over (a failover, planned or not) turns
      // replica a moment later, and each node learns it by gossip.
      const empty = view.find((other) =>
        other.role === "master" && other.slots.length === 0 && ports.has(other.port)
      );
      if (empty !== undefined) {
        return `${node.name} sees port ${empty.port} as a master of no slots`;
      }
      layouts.add(slotLayout(view));
      if (view.find((other) => other.myself)?.role === "replica") {
        const replication = parseInfo(await this.cli(node.port, "INFO", "replication"));
        if (
          replication.get("master_link_status") !== "up" ||
          replication.get("master_sync_in_progress") !== "0"
        ) return `${node.name}: replica not in sync with its master`;
      }
    }
    if (layouts.size > 1) return `nodes disagree on the slots: ${[...layouts].join(" | ")}`;
    const view = await this.view();
    for (const master of view.filter((node) => node.role === "master" && node.slots.length > 0)) {
      if (!(await this.#replicasFollow(view, master))) {
        return `a replica of port ${master.port} does not hold its latest write yet`;
      }
    }
    return "";
  }
}
