/**
 * The entry points of the fault suite (`tests/faults/`, {@linkcode scenario}: one standalone Redis)
 * and the Redis Cluster tests (`tests/cluster/`, {@linkcode clusterScenario}: a cluster of 3
 * masters and 3 replicas). Each test file starts its topology and one PostgreSQL on first use and
 * stops them after its last test; every scenario is a `Deno.test` of its own with a fresh
 * {@linkcode Stage} (a fresh queue name, an empty table, its own processes, SIGKILLed afterwards
 * whatever happened), so `deno test --filter` runs any one alone. A scenario that kills a master
 * brings it back before it ends; the next stage heals the topology anyway.
 *
 * @module
 */

import { withLoadTurn } from "@users-pipeline/harness/load_turn";
import { Stage } from "./stage.ts";
import { ClusterRedis, StandaloneRedis } from "./topology.ts";
import { FileWorld } from "./world.ts";

export { TEST_APP } from "./world.ts";

/** Options of {@linkcode scenario}. */
export interface ScenarioOptions {
  /**
   * Give the scenario a Redis of its own, started fresh and stopped after it,
   * for one whose fault would outlast it (a lowered maxmemory). @default false
   */
  ownRedis?: boolean;
}

/** Registers a fault scenario on one standalone Redis as a test of its own. */
export function scenario(
  name: string,
  fn: (stage: Stage<StandaloneRedis>) => Promise<void>,
  options: ScenarioOptions = {},
): void {
  register(name, async () => {
    const shared = await standalone.world();
    await using own = options.ownRedis ? await ownTopology() : undefined;
    const world = own === undefined
      ? shared
      : { ...shared, topology: own.topology, redis: own.topology.client };
    await using stage = await Stage.open(world);
    await fn(stage);
  });
}

/** Options of {@linkcode clusterScenario}. */
export interface ClusterScenarioOptions {
  /** QUEUE_SHARDS of every service of the scenario. @default 1 */
  shards?: number;
}

/** Registers a scenario on the file's Redis Cluster as a test of its own. */
export function clusterScenario(
  name: string,
  options: ClusterScenarioOptions,
  fn: (stage: Stage<ClusterRedis>) => Promise<void>,
): void {
  register(name, async () => {
    await using stage = await Stage.open(await cluster.world(), options.shards ?? 1);
    await fn(stage);
  });
}

function register(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name,
    // The file's Redis, PostgreSQL and clients outlive each test, and the
    // services are real processes whose pipes and timers span the scenarios.
    sanitizeOps: false,
    sanitizeResources: false,
  }, () =>
    // Each scenario drives load (up to 1,500 requests a second through four services and six
    // Redis servers): it takes its turn with the Docker tests (load_turn.ts), or their pushes,
    // starved beside it, outlive REDIS_TIMEOUT_MS.
    withLoadTurn(name, fn));
}

/** A topology of its own for one scenario, stopped after it. */
async function ownTopology() {
  const topology = await StandaloneRedis.start();
  return { topology, [Symbol.asyncDispose]: () => topology.close() };
}

const standalone = new FileWorld(StandaloneRedis.start);
const cluster = new FileWorld(ClusterRedis.start);

// Each test file runs in an isolate of its own, so this closes that file's services.
Deno.test.afterAll(async () => {
  await Promise.all([standalone.close(), cluster.close()]);
});
