import assert from "node:assert/strict";
import {
  bulkCapacityInputs,
  type CapacityInputs,
  capacityInputs,
  capacityModel,
  scalingRows,
} from "./capacity.ts";
import { bulkResult, quickResults } from "./testdata/fixtures.ts";

/** Round numbers, so each expectation can be worked out by hand. */
const inputs: CapacityInputs = {
  micros: { traefik: 50, api: 70, redis: 14, consumer: 7, postgres: 7 },
  redisSplit: { ingest: 10, drain: 4 },
  consumerRowsPerSecond: 50_000,
  redisBytesPerUser: 200,
  walBytesPerUser: 0,
};

Deno.test("capacityModel() turns µs per user into users/s per unit at the utilisation ceiling", () => {
  const model = capacityModel(inputs, { utilisation: 0.7 });
  assert.equal(model.unitRates.traefik, 14_000); // 0.7e6 / 50
  assert.equal(model.unitRates.api, 10_000); // 0.7e6 / 70
  assert.equal(model.unitRates.redis, 50_000); // 0.7e6 / 14
  // A consumer holds far less than a core of CPU: its measured rows/s bounds it, not its µs.
  assert.equal(model.unitRates.consumer, 35_000); // 50k × 0.7
  assert.equal(model.unitRates.postgres, 100_000);
  assert.equal(model.totalMicros, 148);
});

Deno.test("capacityModel() sizes each target rate: replicas, consumers, shards, PostgreSQL cores", () => {
  const model = capacityModel(inputs, {
    utilisation: 0.7,
    targets: [100_000],
    backlogSeconds: 60,
    shardMemoryBytes: 1e9,
    maxPrimaryCores: 32,
  });
  const [plan] = model.targets;
  assert.ok(plan);
  assert.equal(plan.apiReplicas, 10);
  assert.equal(plan.consumers, 3); // 100k / 35k
  assert.equal(plan.shardsForCpu, 2); // 100k / 50k
  // 100k/s × 60 s × 200 B = 1.2 GB: two shards of 1 GB to hold it.
  assert.equal(plan.backlogBytes, 1.2e9);
  assert.equal(plan.shardsForMemory, 2);
  assert.equal(plan.shards, 2);
  assert.equal(plan.busyCores.postgres, 0.7);
  assert.ok(Math.abs(plan.cores.postgres - 1) < 1e-9);
  assert.equal(plan.postgresPrimaries, 1);
  assert.ok(Math.abs(plan.totalCores - 148 * 0.1 / 0.7) < 1e-9);
  // Traefik's 7.14 cores, 10 API replicas, 3 consumers and 2 shards: 22.1 cores, three 8-core nodes.
  assert.equal(plan.nodes, 3);
});

Deno.test("capacityModel() names the first limit and puts one primary's limit at its core cap", () => {
  const model = capacityModel(inputs, { maxPrimaryCores: 32, targets: [10_000_000] });
  assert.equal(model.oneShardLimit, 50_000);
  assert.equal(model.onePrimaryLimit, 3_200_000);
  assert.equal(model.primaryBound, "cores");
  assert.equal(model.firstLimit, "redis");
  // 10M/s needs 100 cores of PostgreSQL: more than one primary of 32 holds.
  assert.equal(model.targets[0]?.postgresPrimaries, 4);
  const pgFirst = capacityModel({ ...inputs, micros: { ...inputs.micros, postgres: 500 } }, {
    maxPrimaryCores: 2,
  });
  assert.equal(pgFirst.firstLimit, "postgres");
});

Deno.test("capacityModel() bounds one primary by its WAL when that comes first", () => {
  // 700 B of WAL per row at 100 MB/s × 0.7: 100k rows/s, far below its 32 cores' 3.2M.
  const model = capacityModel({ ...inputs, walBytesPerUser: 700 }, {
    primaryWalBytesPerSecond: 100e6,
    targets: [250_000],
  });
  assert.equal(model.onePrimaryLimit, 100_000);
  assert.equal(model.primaryBound, "WAL");
  assert.equal(model.firstLimit, "redis");
  assert.equal(model.targets[0]?.postgresPrimaries, 3);
  assert.equal(model.targets[0]?.walBytesPerSecond, 175e6);
  const rows = scalingRows(model, [1, 64]);
  assert.equal(rows.find((r) => r.tier === "postgres" && r.units === 64)?.usersPerSecond, 100_000);
});

Deno.test("capacityModel() refuses a utilisation outside (0, 1] and a cost that is not positive", () => {
  assert.throws(() => capacityModel(inputs, { utilisation: 0 }), RangeError);
  assert.throws(() => capacityModel(inputs, { utilisation: 1.5 }), RangeError);
  assert.throws(
    () => capacityModel({ ...inputs, micros: { ...inputs.micros, redis: Number.NaN } }),
    /redis tier's cost/,
  );
});

Deno.test("scalingRows() grows linearly with units, except one primary's cores past the cap", () => {
  const model = capacityModel(inputs, { maxPrimaryCores: 4 });
  const rows = scalingRows(model, [1, 2, 8]);
  const at = (tier: string, units: number) =>
    rows.find((r) => r.tier === tier && r.units === units)?.usersPerSecond;
  assert.equal(at("api", 8), 8 * 10_000);
  assert.equal(at("redis", 2), 100_000);
  assert.equal(at("postgres", 2), 200_000);
  assert.equal(at("postgres", 8), 400_000);
});

Deno.test("bulkCapacityInputs() takes every tier's cost from the bulk run of 100 per request", async () => {
  const results = await quickResults();
  assert.equal(bulkCapacityInputs(results), undefined);
  const bulk = bulkResult();
  const inputs = bulkCapacityInputs({ ...results, bulk })!;
  const run = bulk.batches.find((r) => r.usersPerRequest === 100)!;
  assert.deepEqual(inputs.micros, {
    traefik: run.microsPerUser.traefik,
    api: run.microsPerUser.api,
    redis: run.microsPerUser.redis,
    consumer: run.microsPerUser.consumers,
    postgres: run.microsPerUser.postgres,
  });
  // What does not depend on how users arrive stays the drain's.
  const base = capacityInputs(results)!;
  assert.equal(inputs.consumerRowsPerSecond, base.consumerRowsPerSecond);
  assert.equal(inputs.walBytesPerUser, base.walBytesPerUser);
  assert.ok(
    capacityModel(inputs).targets.at(-1)!.totalCores <
      capacityModel(base).targets.at(-1)!.totalCores,
  );
});
