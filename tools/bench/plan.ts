/**
 * How big and how long each phase is, for the quick run (CI: a smoke test of
 * the whole harness in about two minutes), the full run (the evidence, about
 * a quarter of an hour) and the capacity run (`--capacity`: only what the
 * capacity model needs, about a minute and a half).
 *
 * @module
 */

import type { BulkPlan } from "./bulk.ts";
import type { DrainPlan } from "./drain.ts";
import type { EndToEndPlan } from "./end_to_end.ts";
import type { GrowthPlan } from "./growth.ts";
import type { IngestPlan } from "./ingest.ts";
import type { TraefikPlan } from "./through_traefik.ts";

/** Every phase's sizes. */
export interface BenchPlan {
  readonly variant: "quick" | "full" | "capacity";
  readonly ingest: IngestPlan;
  readonly traefik: TraefikPlan;
  readonly drain: DrainPlan;
  readonly endToEnd: EndToEndPlan;
  readonly growth: GrowthPlan;
  readonly bulk: BulkPlan;
}

/** The full run: the evidence's sizes. */
export const FULL_PLAN: BenchPlan = {
  variant: "full",
  ingest: {
    rounds: 3,
    warmupSeconds: 2,
    seconds: 10,
    connections: 64,
    profileSeconds: 10,
  },
  traefik: { rounds: 3, warmupSeconds: 2, seconds: 10, connections: 64, replicas: 2 },
  drain: {
    users: 200_000,
    singleUsers: 20_000,
    batchSizes: [100, 1_000, 5_000],
    replicas: [1, 2],
    profileUsers: 200_000,
  },
  endToEnd: {
    seconds: 60,
    fractions: [0.125, 0.25, 0.5, 0.75, 1],
    ceilingSeconds: 10,
    servers: 2,
    consumers: 2,
  },
  growth: {
    smallBacklog: 100_000,
    largeBacklog: 1_000_000,
    overloadSeconds: 60,
    overloadMaxLength: 5_000,
  },
  bulk: {
    seconds: 10,
    warmupSeconds: 2,
    connections: 64,
    usersPerRequest: [1, 10, 100, 1_000],
    servers: 2,
    consumers: 2,
    profileSeconds: 10,
    openFractions: [0.25, 0.5, 0.75, 1],
    openSeconds: 30,
  },
};

/** The quick run: every phase and code path, small and short. */
export const QUICK_PLAN: BenchPlan = {
  variant: "quick",
  ingest: {
    rounds: 1,
    warmupSeconds: 1,
    seconds: 3,
    connections: 64,
    profileSeconds: 2,
  },
  traefik: { rounds: 1, warmupSeconds: 1, seconds: 3, connections: 64, replicas: 2 },
  drain: {
    users: 20_000,
    singleUsers: 1_000,
    batchSizes: [100, 1_000, 5_000],
    replicas: [1, 2],
    profileUsers: 20_000,
  },
  // One rate well inside what the whole stack sustains on two cores (about a quarter of
  // Traefik's ceiling): below the ceiling every answer must come in time and next to nothing may
  // go unsent, so a smoke test at a rate this machine cannot keep up with would fail on its CPU.
  endToEnd: { seconds: 5, fractions: [0.125], ceilingSeconds: 3, servers: 2, consumers: 2 },
  growth: {
    smallBacklog: 10_000,
    largeBacklog: 100_000,
    overloadSeconds: 8,
    overloadMaxLength: 2_000,
  },
  bulk: {
    seconds: 3,
    warmupSeconds: 1,
    connections: 64,
    usersPerRequest: [1, 10, 100, 1_000],
    servers: 2,
    consumers: 2,
    profileSeconds: 2,
    // One rate well inside what the stack sustains, as the end-to-end phase's quick run.
    openFractions: [0.25],
    openSeconds: 5,
  },
};

/**
 * The capacity run: the traefik phase (Traefik, API and Redis per request),
 * one drain of batch 1000 × 1 (consumer, PostgreSQL and Redis per row,
 * Redis bytes per user) and the bulk run of 100 users per request (every
 * tier per user, for the model's bulk column), with the other phases' sizes small in case `--only`
 * asks for them.
 */
export const CAPACITY_PLAN: BenchPlan = {
  ...QUICK_PLAN,
  variant: "capacity",
  traefik: { rounds: 2, warmupSeconds: 2, seconds: 10, connections: 64, replicas: 2 },
  drain: {
    users: 200_000,
    singleUsers: 2_000,
    batchSizes: [1_000],
    replicas: [1],
    profileUsers: 0,
  },
  bulk: {
    ...QUICK_PLAN.bulk,
    seconds: 10,
    warmupSeconds: 2,
    usersPerRequest: [100],
    profileSeconds: 0,
    openFractions: [],
  },
};
