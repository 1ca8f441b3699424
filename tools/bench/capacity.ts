/**
 * The capacity model: users/s by units of each tier. One machine of two cores cannot show a scaling
 * curve, so the benchmark measures what each tier costs per user — CPU µs per
 * request for Traefik, the API and Redis (phase "traefik", our API behind
 * Traefik at the stack's defaults), CPU µs per row for the consumer,
 * PostgreSQL and Redis (phase "drain", batch 1000 × 1 consumer), bytes of
 * Redis memory per queued user (the same drain's backlog) — and scales them:
 *
 * - every tier scales linearly with its units (cores, processes, shards)
 *   until a unit is full, which is at `utilisation` of it (headroom for
 *   bursts, GC pauses and failover);
 * - Traefik is multi-threaded: it needs cores, spread over as many instances
 *   as wanted;
 * - an API replica or a consumer is one Deno process, whose JavaScript runs on
 *   one thread: it holds about one core. API replicas follow from their CPU;
 *   consumers from the rows/s one consumer stored (most of its time is spent
 *   waiting on Redis and PostgreSQL round trips, so its CPU alone would
 *   count too few);
 * - a Redis shard (a master; with `QUEUE_SHARDS=K` the queue is K lists on K
 *   Redis Cluster masters) executes commands on one thread: shards =
 *   ceil(Redis µs × rate / (1e6 × utilisation)), and at least enough to
 *   hold a backlog of `backlogSeconds` at the rate within `shardMemoryBytes`;
 * - PostgreSQL is one primary taking every row: its cores are
 *   PostgreSQL µs × rate / (1e6 × utilisation), and its WAL grows by the
 *   measured bytes per row; once the cores pass `maxPrimaryCores` or the WAL
 *   passes `primaryWalBytesPerSecond` (at the utilisation ceiling), one
 *   primary is the limit (partition the table, batch across partitions, or a
 *   distributed PostgreSQL).
 *
 * Pure functions: capacity_test.ts checks the arithmetic; report.ts and
 * chart_spec.ts show the model.
 *
 * @module
 */

import { FLOOR_BATCH } from "./drain.ts";
import type { BenchResults } from "./results.ts";
import { frontMicrosPerRequest } from "./through_traefik.ts";

/** The tiers of the model, in the order a user passes them. */
export const TIERS = ["traefik", "api", "redis", "consumer", "postgres"] as const;

/** One tier. */
export type Tier = typeof TIERS[number];

/** What one user costs each tier, as measured. */
export interface CapacityInputs {
  /** CPU µs per user, by tier (Redis: its ingest and drain costs added). */
  readonly micros: Readonly<Record<Tier, number>>;
  /** Redis's CPU µs per user taking it in (the push) and handing it out (fetch and ack). */
  readonly redisSplit: { readonly ingest: number; readonly drain: number };
  /** Rows per second one consumer stored (batch 1000). */
  readonly consumerRowsPerSecond: number;
  /** Redis memory per queued user, bytes (the list and the status index). */
  readonly redisBytesPerUser: number;
  /** PostgreSQL WAL per stored user, bytes. */
  readonly walBytesPerUser: number;
}

/** The model's assumptions. */
export interface CapacityOptions {
  /** The share of a unit (core, process, shard) used before it counts as full. @default 0.7 */
  readonly utilisation?: number;
  /** The rates to plan for, users/s. @default 10k, 100k, 1M */
  readonly targets?: readonly number[];
  /** The backlog Redis must hold, in seconds of the rate (a consumer outage). @default 60 */
  readonly backlogSeconds?: number;
  /** The memory one Redis shard may use for the queue (its maxmemory). @default 8 GiB */
  readonly shardMemoryBytes?: number;
  /** The most cores one PostgreSQL primary is given. @default 32 */
  readonly maxPrimaryCores?: number;
  /** The WAL one primary writes at most, bytes/s (its disk and WAL insertion). @default 256 MiB/s */
  readonly primaryWalBytesPerSecond?: number;
  /** Cores of one node, to count nodes for the stateless tiers and Redis. @default 8 */
  readonly nodeCores?: number;
}

/** The defaults of {@linkcode CapacityOptions}. */
export const CAPACITY_DEFAULTS: Required<CapacityOptions> = {
  utilisation: 0.7,
  targets: [10_000, 100_000, 1_000_000],
  backlogSeconds: 60,
  shardMemoryBytes: 8 * 2 ** 30,
  maxPrimaryCores: 32,
  primaryWalBytesPerSecond: 256 * 2 ** 20,
  nodeCores: 8,
};

/** What one target rate needs. */
export interface TargetPlan {
  readonly rate: number;
  /** Cores each tier burns at this rate, at full use (µs × rate / 1e6). */
  readonly busyCores: Readonly<Record<Tier, number>>;
  /** Cores to provision, at the utilisation ceiling. */
  readonly cores: Readonly<Record<Tier, number>>;
  readonly apiReplicas: number;
  readonly consumers: number;
  /** Redis shards for its CPU. */
  readonly shardsForCpu: number;
  /** Redis shards to hold the backlog. */
  readonly shardsForMemory: number;
  /** QUEUE_SHARDS: the larger of the two. */
  readonly shards: number;
  /** Bytes the backlog of `backlogSeconds` takes in Redis. */
  readonly backlogBytes: number;
  /** WAL the primary writes at this rate, bytes/s. */
  readonly walBytesPerSecond: number;
  /**
   * PostgreSQL primaries (partitions on primaries of their own, or the
   * nodes of a distributed PostgreSQL) for the cores and the WAL: above 1,
   * one primary is the limit.
   */
  readonly postgresPrimaries: number;
  /** Every tier's cores added up. */
  readonly totalCores: number;
  /**
   * Nodes of `nodeCores` for everything but PostgreSQL: Traefik's cores, one
   * core per API replica, consumer and Redis shard, packed.
   */
  readonly nodes: number;
}

/** The whole model. */
export interface CapacityModel {
  readonly inputs: CapacityInputs;
  readonly options: Required<CapacityOptions>;
  /**
   * The rate one unit of each tier ({@linkcode TIER_UNITS}: a core of Traefik or of the
   * PostgreSQL primary, an API replica, a Redis shard, a consumer) takes at the utilisation
   * ceiling, users/s.
   */
  readonly unitRates: Readonly<Record<Tier, number>>;
  /** The rate at which one Redis shard (QUEUE_SHARDS=1) is full. */
  readonly oneShardLimit: number;
  /** The rate at which one PostgreSQL primary is full: its cores or its WAL. */
  readonly onePrimaryLimit: number;
  /** Which of the two bounds one primary first. */
  readonly primaryBound: "cores" | "WAL";
  /** The tier that is full first while the stateless tiers scale out: redis or postgres. */
  readonly firstLimit: "redis" | "postgres";
  /** CPU µs per user, all tiers. */
  readonly totalMicros: number;
  /** Users/s one machine of `cores` cores would take with every tier on it, at the ceiling. */
  readonly perMachine: (cores: number) => number;
  readonly targets: readonly TargetPlan[];
}

/**
 * The model's inputs from one run's results, or undefined when the run lacks
 * the traefik phase's queue runs or the drain's batch 1000 × 1 run.
 */
export function capacityInputs(results: BenchResults): CapacityInputs | undefined {
  const front = results.traefik?.runs.queue;
  const drain = results.drain?.batch.find((r) =>
    r.mode === "batch" && r.batchSize === FLOOR_BATCH && r.replicas === 1
  );
  if (!front?.length || drain === undefined) return undefined;
  const perRow = (cores: number) => cores / drain.rowsPerSecond * 1e6;
  const redisIngest = frontMicrosPerRequest(front, "redis");
  const redisDrain = perRow(drain.redisCores);
  return {
    micros: {
      traefik: frontMicrosPerRequest(front, "traefik"),
      api: frontMicrosPerRequest(front, "api"),
      redis: redisIngest + redisDrain,
      consumer: perRow(drain.consumerCores),
      postgres: perRow(drain.postgresCores),
    },
    redisSplit: { ingest: redisIngest, drain: redisDrain },
    consumerRowsPerSecond: drain.rowsPerSecond,
    redisBytesPerUser: drain.redisBytesPerUser ?? Number.NaN,
    walBytesPerUser: drain.walBytesPerUser ?? Number.NaN,
  };
}

/** The users per request of the model's bulk column. */
export const BULK_CAPACITY_SIZE = 100;

/**
 * The model's inputs for clients that send {@linkcode BULK_CAPACITY_SIZE}
 * users per request: every tier's CPU per user from the bulk phase's run of
 * that size, which measures them together (the front per request spread
 * over its users, Redis's push and fetch, the consumers and PostgreSQL to
 * stored); what does not depend on how users arrive (a consumer's rows/s,
 * Redis bytes per queued user, WAL per row) from the same drain as
 * {@linkcode capacityInputs}. Undefined when the run lacks either.
 */
export function bulkCapacityInputs(results: BenchResults): CapacityInputs | undefined {
  const base = capacityInputs(results);
  const run = results.bulk?.batches.find((r) => r.usersPerRequest === BULK_CAPACITY_SIZE);
  if (base === undefined || run === undefined) return undefined;
  const us = run.microsPerUser;
  return {
    ...base,
    micros: {
      traefik: us.traefik,
      api: us.api,
      redis: us.redis,
      consumer: us.consumers,
      postgres: us.postgres,
    },
    // The bulk run reads Redis whole; the drain's share of it is the drain's own figure.
    redisSplit: {
      ingest: Math.max(0, us.redis - base.redisSplit.drain),
      drain: Math.min(us.redis, base.redisSplit.drain),
    },
  };
}

/**
 * Builds the model from measured inputs.
 *
 * @throws {RangeError} when utilisation is not in (0, 1] or a cost is not positive.
 */
export function capacityModel(
  inputs: CapacityInputs,
  options: CapacityOptions = {},
): CapacityModel {
  const o: Required<CapacityOptions> = { ...CAPACITY_DEFAULTS, ...options };
  if (!(o.utilisation > 0 && o.utilisation <= 1)) {
    throw new RangeError(
      `Cannot model capacity as utilisation must be in (0, 1]: current value is ${o.utilisation}`,
    );
  }
  for (const tier of TIERS) {
    if (!(inputs.micros[tier] > 0)) {
      throw new RangeError(
        `Cannot model capacity as the ${tier} tier's cost per user must be positive: current value is ${
          inputs.micros[tier]
        }`,
      );
    }
  }
  const { micros } = inputs;
  const perUnit = (us: number) => 1e6 * o.utilisation / us;
  const unitRates: Record<Tier, number> = {
    traefik: perUnit(micros.traefik),
    api: perUnit(micros.api),
    redis: perUnit(micros.redis),
    consumer: Math.min(inputs.consumerRowsPerSecond, 1e6 / micros.consumer) * o.utilisation,
    postgres: perUnit(micros.postgres),
  };
  const totalMicros = TIERS.reduce((sum, tier) => sum + micros[tier], 0);
  const oneShardLimit = unitRates.redis;
  const primaryByCores = unitRates.postgres * o.maxPrimaryCores;
  const primaryByWal = inputs.walBytesPerUser > 0
    ? o.primaryWalBytesPerSecond * o.utilisation / inputs.walBytesPerUser
    : Infinity;
  const onePrimaryLimit = Math.min(primaryByCores, primaryByWal);
  const targets = o.targets.map((rate): TargetPlan => {
    const busyCores = Object.fromEntries(
      TIERS.map((tier) => [tier, micros[tier] * rate / 1e6]),
    ) as Record<Tier, number>;
    const cores = Object.fromEntries(
      TIERS.map((tier) => [tier, busyCores[tier] / o.utilisation]),
    ) as Record<Tier, number>;
    const backlogBytes = inputs.redisBytesPerUser * rate * o.backlogSeconds;
    const shardsForCpu = Math.ceil(rate / unitRates.redis);
    const shardsForMemory = Number.isFinite(backlogBytes)
      ? Math.ceil(backlogBytes / o.shardMemoryBytes)
      : 1;
    const shards = Math.max(shardsForCpu, shardsForMemory, 1);
    const apiReplicas = Math.ceil(rate / unitRates.api);
    const consumers = Math.ceil(rate / unitRates.consumer);
    return {
      rate,
      busyCores,
      cores,
      apiReplicas,
      consumers,
      shardsForCpu,
      shardsForMemory,
      shards,
      backlogBytes,
      walBytesPerSecond: inputs.walBytesPerUser * rate,
      postgresPrimaries: Math.max(1, Math.ceil(rate / onePrimaryLimit)),
      totalCores: TIERS.reduce((sum, tier) => sum + cores[tier], 0),
      nodes: Math.ceil(
        (cores.traefik + apiReplicas + consumers + shards) / o.nodeCores,
      ),
    };
  });
  return {
    inputs,
    options: o,
    unitRates,
    oneShardLimit,
    onePrimaryLimit,
    primaryBound: primaryByWal < primaryByCores ? "WAL" : "cores",
    firstLimit: oneShardLimit <= onePrimaryLimit ? "redis" : "postgres",
    totalMicros,
    perMachine: (cores) => cores * 1e6 * o.utilisation / totalMicros,
    targets,
  };
}

/**
 * Throughput of each tier with `units` of it (cores of Traefik, API
 * replicas, Redis shards, consumers, cores of the one PostgreSQL primary,
 * which stop adding once the primary is full: `maxPrimaryCores` or its WAL),
 * for the chart and the table.
 */
export function scalingRows(
  model: CapacityModel,
  units: readonly number[] = [1, 2, 4, 8, 16, 32, 64],
): { tier: Tier; units: number; usersPerSecond: number }[] {
  return TIERS.flatMap((tier) =>
    units.map((n) => ({
      tier,
      units: n,
      usersPerSecond: tier === "postgres"
        ? Math.min(model.unitRates.postgres * n, model.onePrimaryLimit)
        : model.unitRates[tier] * n,
    }))
  );
}

/** A tier's unit, as the tables name it. */
export const TIER_UNITS: Readonly<Record<Tier, string>> = {
  traefik: "core",
  api: "replica",
  redis: "shard",
  consumer: "consumer",
  postgres: "core of the primary",
};

const fmt = (n: number) =>
  n >= 100
    ? Math.round(n).toLocaleString("en-US")
    : n.toLocaleString("en-US", { maximumFractionDigits: 1 });
const bytes = (n: number) =>
  n >= 2 ** 30
    ? `${(n / 2 ** 30).toFixed(1)} GiB`
    : n >= 2 ** 20
    ? `${(n / 2 ** 20).toFixed(0)} MiB`
    : `${n.toFixed(0)} B`;

export { bytes as formatBytes, fmt as formatRate };
