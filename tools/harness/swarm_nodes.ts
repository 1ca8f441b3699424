/**
 * A swarm of several Docker engines on this one machine, for tests: each engine is a "node" with
 * its own network namespace and address, hostname, mount namespace (so its own `/run`, hence its
 * own `/var/run/docker.sock` for what it runs), data root (in memory) and cgroup. The nodes meet
 * on a bridge of the host's, so the swarm's overlay network is real VXLAN between real addresses,
 * and the host reaches every node (its published ports, its engine's socket) as an operator would.
 *
 * A node can be *lost*: its link goes down and everything it ran (engine, containerd, shims,
 * containers) is killed at once, as when a machine loses power. The swarm only learns of it
 * from the missing heartbeats.
 *
 * Everything is named after the pid of the process that made it (`uplnodes-<pid>`), so parallel
 * runs never meet, and {@linkcode SwarmNodes.start} first removes what a run that died left
 * behind. Needs root, `ip` (iproute2), `nsenter` and `unshare` (util-linux), `iptables` and
 * `dockerd`.
 *
 * @module
 */

import { runCommand } from "./run_command.ts";
import { waitFor } from "./wait.ts";

/** One engine of the swarm. */
export interface SwarmNode {
  /** 1 for the first node (the manager), 2 and 3 for the workers. */
  readonly index: number;
  /** Its hostname, which `docker node ls` shows: `node<index>`. */
  readonly hostname: string;
  /** Its address on the host's bridge. */
  readonly address: string;
  /** Its network namespace (`ip netns`). */
  readonly netns: string;
  /** Its engine's socket as the host sees it. */
  readonly socket: string;
  /** The host's end of its link. */
  readonly link: string;
}

/** Options of {@linkcode SwarmNodes.start}. */
export interface SwarmNodesOptions {
  /** How many engines. @default 3 */
  count?: number;
  /**
   * The swarm's heartbeat: how often a node reports to the manager, which declares it down after
   * a few missed ones. @default "2s" (Docker's own 5 s makes a lost node take half a minute to
   * notice, most of a test's load)
   */
  heartbeat?: string;
}

const PREFIX = "uplnodes";
const STATE_ROOT = "/var/lib";
const CGROUP_ROOT = "/sys/fs/cgroup";
/** 10.213.N.0/24 for some N: private, and far from Docker's default pools (172.17+, 192.168). */
const SUBNET_BASE = "10.213";

/** Runs a program and returns its stdout; throws with its output unless it exited 0. */
async function mustRun(program: string, args: readonly string[]): Promise<string> {
  const result = await runCommand(program, args);
  if (result.code !== 0) {
    throw new Error(
      `${program} ${args.join(" ")} exited with code ${result.code}:\n` +
        `${result.stdout.slice(-2_000)}\n${result.stderr.slice(-2_000)}`,
    );
  }
  return result.stdout;
}

/** An IPv4 prefix ("10.213.7.0/24", "10.0.0.1") as its network number and length, if it is one. */
function parsePrefix(text: string): { network: number; bits: number } | undefined {
  const match = text.match(/^(\d+)\.(\d+)\.(\d+)\.(\d+)(?:\/(\d+))?$/);
  if (!match) return undefined;
  const bits = Number(match[5] ?? 32);
  const address = match.slice(1, 5).reduce((n, octet) => n * 256 + Number(octet), 0);
  if (bits > 32) return undefined;
  return { network: address - address % 2 ** (32 - bits), bits };
}

/** Whether two prefixes share an address: they agree on the shorter one's bits. */
function overlaps(a: { network: number; bits: number }, b: { network: number; bits: number }) {
  const size = 2 ** (32 - Math.min(a.bits, b.bits));
  return Math.floor(a.network / size) === Math.floor(b.network / size);
}

/**
 * The third octet of a 10.213.N.0/24 that overlaps none of `routes` (destinations as `ip route`
 * prints them: "10.213.7.0/24", "172.17.0.0/16", "default"…): the first free one from `seed` on.
 *
 * @throws {RangeError} when every one is taken.
 */
export function pickSubnet(routes: readonly string[], seed: number): number {
  const taken = routes.flatMap((route) => parsePrefix(route) ?? []);
  for (let i = 0; i < 254; i++) {
    const octet = 1 + (seed + i) % 254;
    const candidate = parsePrefix(`${SUBNET_BASE}.${octet}.0/24`)!;
    if (!taken.some((route) => overlaps(route, candidate))) return octet;
  }
  throw new RangeError(
    `Cannot pick a subnet in ${SUBNET_BASE}.0.0/16: current value of the routes covers it all ` +
      `(${routes.join(", ")})`,
  );
}

/**
 * The pids in names made by this module (`uplnodes-<pid>…`, `uplb<pid>`, `uplv<pid>n<i>`) whose
 * process is not in `alive`: what a run that died left behind.
 */
export function deadRunPids(names: readonly string[], alive: (pid: number) => boolean): number[] {
  const pids = new Set<number>();
  for (const name of names) {
    const match = name.match(/^(?:uplnodes-|uplb|uplv)(\d+)(?:$|[-n])/);
    if (match) pids.add(Number(match[1]));
  }
  return [...pids].filter((pid) => !alive(pid)).sort((a, b) => a - b);
}

/** Names of what a run with pid `pid` makes. */
function namesOf(pid: number) {
  return {
    dir: `${STATE_ROOT}/${PREFIX}-${pid}`,
    bridge: `uplb${pid}`,
    link: (i: number) => `uplv${pid}n${i}`,
    netns: (i: number) => `${PREFIX}-${pid}-n${i}`,
    cgroup: (i: number) => `${PREFIX}-${pid}-n${i}`,
  };
}

function processAlive(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

/** The names in a directory; none when it is not there (or went away meanwhile). */
function dirNames(path: string, { dirsOnly = false } = {}): string[] {
  try {
    return [...Deno.readDirSync(path)].filter((entry) => !dirsOnly || entry.isDirectory)
      .map((entry) => entry.name);
  } catch {
    return [];
  }
}

/** cgroup v2 (one unified hierarchy) or v1 (a freezer hierarchy among others). */
function cgroupV2(): boolean {
  try {
    Deno.statSync(`${CGROUP_ROOT}/cgroup.controllers`);
    return true;
  } catch {
    return false;
  }
}

/** The hierarchies a node's cgroup lives in: every one under v1 (Docker creates them all). */
function hierarchies(): string[] {
  if (cgroupV2()) return [CGROUP_ROOT];
  return dirNames(CGROUP_ROOT).map((name) => `${CGROUP_ROOT}/${name}`).filter((path) => {
    try {
      return Deno.statSync(`${path}/cgroup.procs`).isFile;
    } catch {
      return false;
    }
  });
}

/** Every pid in the cgroup `path` and below. */
function pidsUnder(path: string): number[] {
  const pids: number[] = [];
  const walk = (dir: string) => {
    try {
      for (const line of Deno.readTextFileSync(`${dir}/cgroup.procs`).split("\n")) {
        if (line.trim() !== "") pids.push(Number(line));
      }
    } catch {
      return;
    }
    for (const name of dirNames(dir, { dirsOnly: true })) walk(`${dir}/${name}`);
  };
  walk(path);
  return pids;
}

/**
 * Kills every process of a node's cgroup at once: frozen first (v1) so nothing forks or reacts
 * while the rest dies, or with cgroup.kill (v2). Returns how many processes there were.
 */
async function killCgroup(name: string): Promise<number> {
  if (cgroupV2()) {
    const path = `${CGROUP_ROOT}/${name}`;
    const count = pidsUnder(path).length;
    if (count > 0) await Deno.writeTextFile(`${path}/cgroup.kill`, "1");
    await waitFor(`the processes of ${name} to die`, () => pidsUnder(path).length === 0, {
      timeoutMs: 10_000,
    });
    return count;
  }
  const freezer = `${CGROUP_ROOT}/freezer/${name}`;
  // Containers join every hierarchy; the engine and its helpers only the freezer one.
  const all = () => [...new Set(hierarchies().flatMap((h) => pidsUnder(`${h}/${name}`)))];
  const count = all().length;
  if (count === 0) return 0;
  // A task frozen by the v1 freezer acts on SIGKILL only once thawed: kill all, then thaw.
  const frozen = dirNames(freezer).length > 0; // a cgroup directory is never empty
  if (frozen) await Deno.writeTextFile(`${freezer}/freezer.state`, "FROZEN");
  const killAll = () => {
    const pids = all();
    for (const pid of pids) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch {
        // Gone already.
      }
    }
    return pids.length === 0;
  };
  try {
    killAll();
  } finally {
    if (frozen) await Deno.writeTextFile(`${freezer}/freezer.state`, "THAWED");
  }
  await waitFor(`the processes of ${name} to die`, killAll, { timeoutMs: 10_000, intervalMs: 100 });
  return count;
}

/** Removes a node's cgroup directories (deepest first) in every hierarchy. */
function removeCgroup(name: string): void {
  const remove = (dir: string) => {
    for (const child of dirNames(dir, { dirsOnly: true })) remove(`${dir}/${child}`);
    try {
      Deno.removeSync(dir);
    } catch {
      // Not there in this hierarchy.
    }
  };
  for (const hierarchy of hierarchies()) remove(`${hierarchy}/${name}`);
}

/** Removes everything of the run with pid `pid`, whatever state it is in. */
async function removeRun(pid: number, count: number): Promise<void> {
  const names = namesOf(pid);
  for (let i = 1; i <= count; i++) {
    await killCgroup(names.cgroup(i));
    removeCgroup(names.cgroup(i));
    await runCommand("ip", ["link", "del", names.link(i)]);
    await runCommand("ip", ["netns", "del", names.netns(i)]);
  }
  await runCommand("ip", ["link", "del", names.bridge]);
  // The one rule made on the host's firewall; -D removes one copy, so repeat while it works.
  const rule = ["FORWARD", "-i", names.bridge, "-o", names.bridge, "-j", "ACCEPT"];
  while ((await runCommand("iptables", ["-D", ...rule])).code === 0) { /* again */ }
  // Lazily: a namespace not yet torn down by the kernel may still hold it.
  await runCommand("umount", ["-l", names.dir]);
  await Deno.remove(names.dir, { recursive: true }).catch(() => {});
}

/** The pids of runs that died and left something behind. */
async function leftovers(): Promise<number[]> {
  const links = (await runCommand("ip", ["-o", "link", "show"])).stdout.split("\n")
    .map((line) => line.split(":")[1]?.trim().split("@")[0] ?? "");
  const names = [
    ...links,
    ...dirNames("/run/netns"),
    ...dirNames(STATE_ROOT),
    ...hierarchies().flatMap((h) => dirNames(h)),
  ];
  return deadRunPids(names, processAlive);
}

/** Several Docker engines in network namespaces, joined into one swarm. */
export class SwarmNodes implements AsyncDisposable {
  readonly nodes: readonly SwarmNode[];
  /** Where each node's engine keeps its data and log. */
  readonly dir: string;
  readonly #pid: number;
  #removed = false;

  private constructor(pid: number, subnet: number, count: number) {
    this.#pid = pid;
    const names = namesOf(pid);
    this.dir = names.dir;
    this.nodes = Array.from({ length: count }, (_, k) => {
      const index = k + 1;
      return {
        index,
        hostname: `node${index}`,
        address: `${SUBNET_BASE}.${subnet}.${10 + index}`,
        netns: names.netns(index),
        socket: `${names.dir}/node${index}.sock`,
        link: names.link(index),
      };
    });
  }

  /**
   * Makes the bridge, the namespaces and the engines, and joins them: the first node initialises
   * the swarm and is its one manager, the others join as workers. Removes the leftovers of runs
   * that died first. On failure, removes what it made before throwing.
   */
  static async start(options: SwarmNodesOptions = {}): Promise<SwarmNodes> {
    const { count = 3, heartbeat = "2s" } = options;
    for (const pid of await leftovers()) await removeRun(pid, 9);
    const routes = (await mustRun("ip", ["-4", "route", "show"])).split("\n")
      .map((line) => line.split(" ")[0] ?? "");
    const swarm = new SwarmNodes(Deno.pid, pickSubnet(routes, Deno.pid), count);
    try {
      await swarm.#network();
      await Promise.all(swarm.nodes.map((node) => swarm.#startEngine(node)));
      await swarm.#join(heartbeat);
      return swarm;
    } catch (error) {
      await swarm.remove();
      throw error;
    }
  }

  /** The manager, where `docker stack deploy` and `docker node` commands go. */
  get manager(): SwarmNode {
    return this.nodes[0]!;
  }

  /** The bridge and, per node, a namespace with a link to it. */
  async #network(): Promise<void> {
    const names = namesOf(this.#pid);
    const gateway = this.manager.address.replace(/\.\d+$/, ".1");
    // The engines' data roots in memory: a run extracts some 2.5 GB of image layers, which on
    // disk cost half a minute to delete again and stall every other writer meanwhile.
    await Deno.mkdir(this.dir, { recursive: true });
    await mustRun("mount", ["-t", "tmpfs", "-o", "mode=0711", `${PREFIX}-${this.#pid}`, this.dir]);
    await mustRun("ip", ["link", "add", names.bridge, "type", "bridge"]);
    await mustRun("ip", ["addr", "add", `${gateway}/24`, "dev", names.bridge]);
    await mustRun("ip", ["link", "set", names.bridge, "up"]);
    // A Docker engine on the host sets the FORWARD policy to DROP, and with br_netfilter that
    // also filters frames between ports of any bridge: let the nodes' own bridge through.
    await mustRun("iptables", [
      "-I",
      "FORWARD",
      "1",
      "-i",
      names.bridge,
      "-o",
      names.bridge,
      "-j",
      "ACCEPT",
    ]);
    for (const node of this.nodes) {
      const ip = (...args: string[]) => mustRun("ip", ["-n", node.netns, ...args]);
      await mustRun("ip", ["netns", "add", node.netns]);
      await mustRun("ip", [
        "link",
        "add",
        node.link,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        node.netns,
      ]);
      await mustRun("ip", ["link", "set", node.link, "master", names.bridge, "up"]);
      await ip("link", "set", "lo", "up");
      await ip("addr", "add", `${node.address}/24`, "dev", "eth0");
      await ip("link", "set", "eth0", "up");
      await ip("route", "add", "default", "via", gateway);
    }
  }

  /**
   * Starts a node's dockerd: in the node's network namespace (nsenter, not `ip netns exec`,
   * which remounts /sys and so hides the cgroup hierarchies the engine needs), with its own
   * hostname and mount namespace where a fresh /run gives it the default socket path and exec
   * root, and in its own cgroup (containers below it), so that losing the node can kill all of
   * it. The host reaches the engine on a second socket in the node's directory.
   */
  async #startEngine(node: SwarmNode): Promise<void> {
    const cgroup = namesOf(this.#pid).cgroup(node.index);
    // v2: the engine in <node>/engine, containers in <node>/containers (no process may sit in a
    // cgroup that has children with controllers). v1: the engine in the freezer hierarchy only.
    const engineCgroup = cgroupV2()
      ? `${CGROUP_ROOT}/${cgroup}/engine`
      : `${CGROUP_ROOT}/freezer/${cgroup}/engine`;
    await Deno.mkdir(engineCgroup, { recursive: true });
    const dataRoot = `${this.dir}/node${node.index}`;
    await Deno.mkdir(dataRoot, { recursive: true });
    const log = `${dataRoot}.log`;
    const script = [
      `echo $$ > ${engineCgroup}/cgroup.procs`,
      `hostname ${node.hostname}`,
      "mount -t tmpfs -o mode=755 tmpfs /run",
      `exec dockerd --data-root ${dataRoot} -H unix:///run/docker.sock -H unix://${node.socket}` +
      ` --storage-driver overlay2 --cgroup-parent /${cgroup}/containers >>${log} 2>&1`,
    ].join("\n");
    // nsenter and unshare exec what follows, and so does sh: the child is dockerd itself.
    const child = new Deno.Command("nsenter", {
      args: [
        `--net=/run/netns/${node.netns}`,
        "unshare",
        "--uts",
        "--mount",
        "--propagation",
        "slave",
        "sh",
        "-c",
        script,
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    // A lost or removed node's engine is killed with its cgroup; this process need not wait for it.
    child.unref();
    let exited = false;
    child.status.then(() => exited = true);
    await waitFor(
      `the engine of ${node.hostname} to answer (its log: ${log})`,
      async () => {
        if (exited) throw new Error(`the engine of ${node.hostname} exited (its log: ${log})`);
        return (await this.docker(node, ["info", "--format", "{{.ID}}"])).code === 0;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  }

  /** `docker swarm init` on the manager, `join` on the others, and a label per node. */
  async #join(heartbeat: string): Promise<void> {
    await this.mustDocker(this.manager, [
      "swarm",
      "init",
      "--advertise-addr",
      this.manager.address,
      "--dispatcher-heartbeat",
      heartbeat,
    ]);
    const token = (await this.mustDocker(this.manager, ["swarm", "join-token", "-q", "worker"]))
      .trim();
    for (const node of this.nodes.slice(1)) {
      await this.mustDocker(node, [
        "swarm",
        "join",
        "--token",
        token,
        "--advertise-addr",
        node.address,
        `${this.manager.address}:2377`,
      ]);
    }
  }

  /** The swarm's id of a node. */
  async nodeId(node: SwarmNode): Promise<string> {
    return (await this.mustDocker(node, ["info", "--format", "{{.Swarm.NodeID}}"])).trim();
  }

  /** `docker node update --label-add` for each label, through the manager. */
  async label(node: SwarmNode, labels: Record<string, string>): Promise<void> {
    const id = await this.nodeId(node);
    await this.mustDocker(this.manager, [
      "node",
      "update",
      ...Object.entries(labels).flatMap(([key, value]) => ["--label-add", `${key}=${value}`]),
      id,
    ]);
  }

  /** `docker -H <node's socket> …`; never throws for a non-zero exit. */
  docker(node: SwarmNode, args: readonly string[], options: { stdin?: string } = {}) {
    return runCommand("docker", ["-H", `unix://${node.socket}`, ...args], options);
  }

  /** {@linkcode docker}, throwing with its output unless it exited 0; returns stdout. */
  mustDocker(node: SwarmNode, args: readonly string[]): Promise<string> {
    return mustRun("docker", ["-H", `unix://${node.socket}`, ...args]);
  }

  /**
   * Copies images from the host's engine into the nodes' (`docker save`, then `docker load` on
   * each node side by side): there is no registry to pull from.
   */
  async loadImages(images: readonly string[], nodes: readonly SwarmNode[]): Promise<void> {
    const archive = `${this.dir}/images-${crypto.randomUUID()}.tar`;
    try {
      await mustRun("docker", ["save", "-o", archive, ...images]);
      await Promise.all(nodes.map((node) => this.mustDocker(node, ["load", "-q", "-i", archive])));
    } finally {
      await Deno.remove(archive).catch(() => {});
    }
  }

  /**
   * Loses a node as a machine is lost: its link goes down first (so nothing it sends while dying
   * gets out: peers see silence, not closed connections), then every process it ran dies at once.
   * Returns how many processes that was.
   */
  async lose(node: SwarmNode): Promise<number> {
    await mustRun("ip", ["link", "set", node.link, "down"]);
    return await killCgroup(namesOf(this.#pid).cgroup(node.index));
  }

  /**
   * Kills every node as {@linkcode lose} does (nothing in them is worth a graceful stop) and
   * removes the namespaces, links, bridge, firewall rule, cgroups and data. Safe to call twice.
   */
  async remove(): Promise<void> {
    if (this.#removed) return;
    this.#removed = true;
    await removeRun(this.#pid, this.nodes.length);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.remove();
  }
}
