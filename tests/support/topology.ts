/**
 * The Redis a stage's scenarios run on: one standalone server ({@linkcode StandaloneRedis}) or a
 * Redis Cluster of 3 masters and 3 replicas ({@linkcode ClusterRedis}). A topology starts its
 * servers, gives the services the variables that point them there, lays a queue's keys out over
 * its shards, heals what a failed scenario left broken, and says how long the stage waits on it;
 * everything else a scenario does (`stage.ts`) is the same on both.
 *
 * @module
 */

import { Cluster, Redis } from "ioredis";
import { type QueueKeys, queueShards } from "@users-pipeline/queue";
import { RedisCluster } from "@users-pipeline/harness/redis_cluster";
import { startRedis, type TestRedis } from "@users-pipeline/harness/services";
import type { EnvChanges } from "./service_env.ts";

/**
 * How late Redis may end a blocking command at its timeout (`WAIT`'s, say): it checks those
 * timeouts on its cron tick, every 1000 / `hz` ms, and neither redis.conf nor the cluster's
 * nodes change `hz` from its default of 10. An idle Redis's `WAIT 1 200` with no replica lasts
 * about 300 ms.
 */
export const REDIS_TICK_MS = 100;

/** How long a stage waits for what runs on a topology. */
export interface Patience {
  /** For a service to get ready (its event, its `/readyz`). */
  readonly readyMs: number;
  /** For the queue to drain, unless the scenario says otherwise. */
  readonly drainMs: number;
  /** Between two reads of the queue while draining. */
  readonly drainPollMs: number;
  /** For a service to exit after SIGTERM at the end of a scenario. */
  readonly stopMs: number;
}

/** A Redis deployment the stage runs on; see the module doc. */
export interface Topology {
  /** `standalone` or `cluster`. */
  readonly kind: string;
  /** The test's own client for its checks: it rides out the faults the scenarios cause. */
  readonly client: Redis | Cluster;
  /** The start of each scenario's queue name (a counter follows). */
  readonly queuePrefix: string;
  readonly patience: Patience;
  /**
   * Whether a read may fail while a node is replaced (a cluster between masters): the stage's
   * drain then asks again instead of failing.
   */
  readonly failsOver: boolean;
  /** Settings every API replica takes on this topology before the scenario's own. */
  readonly apiChanges: EnvChanges;
  /** The services' variables that point them at this Redis. */
  env(): Record<string, string>;
  /** The keys of queue `name` split into `shards` shards, shard 0 first. */
  shards(name: string, shards: number): QueueKeys[];
  /** Undoes what a failed scenario may have left (a frozen or dead server) and waits until it serves. */
  heal(): Promise<void>;
  /** The last lines of its servers' output for failure messages, or `undefined` if it keeps none. */
  tail(lines: number): string | undefined;
  /** Disconnects the client and stops the servers. */
  close(): Promise<void>;
}

/** Redis's own `Redis` client, its errors silenced: the scenarios kill Redis on purpose. */
function quietClient(url: string): Redis {
  const redis = new Redis(url);
  // The commands retry; the events need no printing.
  redis.on("error", () => {});
  return redis;
}

/** One redis-server with the repo's redis.conf (AOF on), as compose runs it. */
export class StandaloneRedis implements Topology {
  readonly kind = "standalone";
  readonly queuePrefix = "fault";
  readonly patience: Patience = {
    readyMs: 20_000,
    drainMs: 60_000,
    drainPollMs: 100,
    stopMs: 20_000,
  };
  readonly failsOver = false;
  readonly apiChanges: EnvChanges = {};
  readonly client: Redis;
  /** The server: `kill()`, `freeze()`, `thaw()`, `start()`, `exited`. */
  readonly server: TestRedis["server"];
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  readonly #test: TestRedis;

  private constructor(test: TestRedis) {
    this.#test = test;
    this.server = test.server;
    this.url = test.url;
    this.port = test.port;
    this.client = quietClient(test.url);
  }

  /** Starts a redis-server on a free port with a temp data dir. */
  static async start(): Promise<StandaloneRedis> {
    return new StandaloneRedis(await startRedis());
  }

  env(): Record<string, string> {
    return { REDIS_URL: this.url };
  }

  shards(name: string, shards: number): QueueKeys[] {
    return queueShards(name, { shards });
  }

  async heal(): Promise<void> {
    this.server.thaw();
    if (this.server.pid === undefined) await this.server.start();
  }

  tail(): undefined {
    return undefined;
  }

  async close(): Promise<void> {
    this.client.disconnect();
    await this.#test.close();
  }
}

/**
 * A Redis Cluster of 3 masters and 3 replicas on loopback (`tools/harness/redis_cluster.ts`); the
 * services run in cluster mode (REDIS_CLUSTER_NODES). Six servers and the failovers the
 * scenarios cause make every wait longer than on one server.
 */
export class ClusterRedis implements Topology {
  readonly kind = "cluster";
  readonly queuePrefix = `cluster${Deno.pid}-`;
  readonly patience: Patience = {
    readyMs: 30_000,
    drainMs: 90_000,
    drainPollMs: 200,
    stopMs: 30_000,
  };
  readonly failsOver = true;
  /**
   * REDIS_TIMEOUT_MS as project.env sets it (1 s), not FAST_ENV's half second: a master's death
   * shows either way, and on a machine busy with other tests a push on a healthy cluster can take
   * longer than half a second, a 503 that would measure the machine rather than the cluster.
   */
  readonly apiChanges: EnvChanges = { REDIS_TIMEOUT_MS: undefined };
  /** An ioredis Cluster client; it follows the slots to a promoted replica. */
  readonly client: Cluster;
  readonly cluster: RedisCluster;

  private constructor(cluster: RedisCluster) {
    this.cluster = cluster;
    this.client = new Cluster(
      cluster.nodes.map((node) => ({ host: "127.0.0.1", port: node.port })),
      // Masters are killed on purpose: commands wait for the slots to have an owner again.
      { retryDelayOnClusterDown: 200, retryDelayOnFailover: 200, maxRedirections: 32 },
    );
    this.client.on("error", () => {});
  }

  /** Starts the six nodes and forms the cluster. */
  static async start(): Promise<ClusterRedis> {
    return new ClusterRedis(await RedisCluster.start());
  }

  env(): Record<string, string> {
    return { REDIS_CLUSTER_NODES: this.cluster.seeds };
  }

  /** Tagged keys even for one shard: each shard's keys share a slot, as the scripts need. */
  shards(name: string, shards: number): QueueKeys[] {
    return queueShards(name, { shards, cluster: true });
  }

  /** Starts any node a failed scenario left dead, then waits until the cluster is whole. */
  async heal(): Promise<void> {
    for (const node of this.cluster.nodes) {
      if (!node.server.process.running) await node.server.start();
    }
    await this.cluster.waitHealthy();
  }

  tail(lines: number): string {
    return `--- redis cluster\n${this.cluster.output.tail(lines)}`;
  }

  async close(): Promise<void> {
    this.client.disconnect();
    await this.cluster.close();
  }
}
