import assert from "node:assert/strict";
import { ANSWER_SLACK_MS, type Check, checkResults, checksHeld, checksSummary } from "./checks.ts";
import { type RateRun, UNSENT_SHARE_MAX } from "./end_to_end.ts";
import type { IngestRun } from "./ingest.ts";
import type { BenchResults } from "./results.ts";
import {
  bulkResult,
  emptyResults,
  quickResults,
  quickResultsWithComparisons,
} from "./testdata/fixtures.ts";

function failed(checks: readonly Check[]): string[] {
  return checks.filter((c) => !c.ok).map((c) => `${c.phase}: ${c.rule}`);
}

/** The captured quick run with its last end-to-end rate changed by `change`. */
async function withRate(change: (run: RateRun) => RateRun): Promise<BenchResults> {
  const results = await quickResults();
  const runs = results.endToEnd!.runs;
  return {
    ...results,
    endToEnd: { ...results.endToEnd!, runs: [...runs.slice(0, -1), change(runs.at(-1)!)] },
  };
}

/** The captured run's last end-to-end rate, req/s: below Traefik's ceiling. */
async function lastRate(): Promise<number> {
  return (await quickResults()).endToEnd!.runs.at(-1)!.offered;
}

Deno.test("checkResults() holds every check of a captured clean quick run", async () => {
  const checks = checkResults(await quickResults());
  assert.deepEqual(failed(checks), []);
  assert.deepEqual(
    [...new Set(checks.map((c) => c.phase))],
    ["Ingest", "Traefik", "Drain", "End to end", "Growth"],
  );
  assert.equal(checksSummary(checks), `all ${checks.length} checks held`);
  assert.equal(checksHeld(checks), true);
});

Deno.test("checkResults() fails a rate whose stored rows differ from its 202s", async () => {
  const checks = checkResults(await withRate((run) => ({ ...run, stored: run.stored - 1 })));
  const rate = await lastRate();
  assert.deepEqual(failed(checks), [`End to end: ${rate} req/s: stored = accepted`]);
  assert.match(checksSummary(checks), /^1 of \d+ checks FAILED: .*\d+ stored, \d+ accepted/);
  assert.equal(checksHeld(checks), false);
});

const answersRule = (rate: number) =>
  `End to end: ${rate} req/s: every answer 202, or a 503 queue_full with the backlog at QUEUE_MAX_LENGTH (no fault injected)`;

/** A rate's 503s by cause; `unexplained` are those no record accounts for. */
function refused(
  run: RateRun,
  counts: {
    traefik?: number;
    full?: number;
    unavailable?: number;
    unconfirmed?: number;
    unexplained?: number;
  },
): RateRun {
  const { traefik = 0, full = 0, unavailable = 0, unconfirmed = 0, unexplained = 0 } = counts;
  const total = traefik + full + unavailable + unconfirmed + unexplained;
  return {
    ...run,
    load: { ...run.load, rejected: total },
    refusals: { total, traefik, api: { full, unavailable, unconfirmed }, unexplained },
  };
}

Deno.test("checkResults() fails an answer that is neither 202 nor 503", async () => {
  const checks = checkResults(
    await withRate((run) => ({ ...run, load: { ...run.load, failed: 2 } })),
  );
  assert.deepEqual(failed(checks), [answersRule(await lastRate())]);
});

Deno.test("checkResults() fails, below Traefik's ceiling, a 503 that only a fault explains, though recorded", async () => {
  // The API counted each, by its code; Traefik's own is told by its body. None is an answer the
  // contract gives without a fault, and the benchmark injects none.
  const rate = await lastRate();
  for (
    const counts of [{ unavailable: 1 }, { unconfirmed: 1 }, { traefik: 1 }, { unexplained: 1 }]
  ) {
    for (const sustained of [true, false]) {
      const checks = checkResults(
        await withRate((run) => ({ ...refused(run, counts), sustained })),
      );
      assert.deepEqual(failed(checks), [answersRule(rate)], JSON.stringify(counts));
    }
  }
  const one = checkResults(await withRate((run) => refused(run, { unavailable: 1 })));
  assert.match(one.find((c) => !c.ok)!.measured, / 1 × 503 \(.*, 1 queue_unavailable, /);
});

Deno.test("checkResults() takes a queue_full below Traefik's ceiling only with the backlog at QUEUE_MAX_LENGTH", async () => {
  const results = await quickResults();
  const maxLength = results.endToEnd!.queueMaxLength;
  const atBacklog = (maxBacklog: number) =>
    withRate((run) => ({ ...refused(run, { full: 4 }), maxBacklog }));
  const rate = await lastRate();
  assert.deepEqual(failed(checkResults(await atBacklog(maxLength - 1))), [answersRule(rate)]);
  const full = checkResults(await atBacklog(maxLength));
  assert.deepEqual(failed(full), []);
  assert.match(
    full.find((c) => `End to end: ${c.rule}` === answersRule(rate))!.measured,
    new RegExp(
      `4 × 503 \\(0 Traefik's own \\(no replica ready\\), 4 queue_full, .*; backlog ≤ ${maxLength} of ${maxLength}$`,
    ),
  );
});

Deno.test("checkResults() reports, without failing, 503s of any cause at Traefik's ceiling", async () => {
  const results = await withRate((run) =>
    refused(run, { traefik: 1, unavailable: 1, unexplained: 2 })
  );
  const e2e = results.endToEnd!;
  // A ceiling of the last rate's: the ladder's top rung.
  const rate = await lastRate();
  const atCeiling = checkResults({ ...results, endToEnd: { ...e2e, ceiling: rate } });
  assert.deepEqual(failed(atCeiling), []);
  assert.ok(atCeiling.some((c) => /at the ceiling: unexplained 503s reported/.test(c.rule)));
  // Neither what was not sent nor the answers' time is held at the ceiling.
  assert.ok(!atCeiling.some((c) => /not sent|every answer within/.test(c.rule)));
});

const unsentRule = (rate: number) =>
  `End to end: ${rate} req/s (the lowest rate, which must be sustained): requests not sent ≤ ${
    UNSENT_SHARE_MAX * 100
  }% of those asked (more: every oha connection waited on an answer)`;

Deno.test("checkResults() bounds the requests not sent below Traefik's ceiling", async () => {
  const results = await quickResults();
  const asked = Math.round(results.endToEnd!.runs.at(-1)!.offered * results.endToEnd!.plan.seconds);
  const unsent = async (dropped: number) =>
    checkResults(await withRate((run) => ({ ...run, load: { ...run.load, dropped } })));
  assert.deepEqual(failed(await unsent(Math.floor(asked * UNSENT_SHARE_MAX))), []);
  const many = await unsent(Math.floor(asked * UNSENT_SHARE_MAX) + 1);
  assert.deepEqual(failed(many), [unsentRule(await lastRate())]);
  assert.match(
    many.find((c) => !c.ok)!.measured,
    new RegExp(`^\\d+ of ${asked} not sent; oha used [\\d.]+ cores, the machine [\\d.]+$`),
  );
});

Deno.test("checkResults() holds every answer below Traefik's ceiling to REDIS_TIMEOUT_MS + 100 ms", async () => {
  const results = await quickResults();
  const bound = results.endToEnd!.redisTimeoutMs + ANSWER_SLACK_MS;
  const slowest = async (slowestMs: number) =>
    checkResults(await withRate((run) => ({ ...run, load: { ...run.load, slowestMs } })));
  assert.deepEqual(failed(await slowest(bound)), []);
  const rule =
    `End to end: ${await lastRate()} req/s (sustained): every answer within REDIS_TIMEOUT_MS + 100 ms = ${bound} ms from its due time (docs/delivery.md: every answer is prompt)`;
  assert.deepEqual(failed(await slowest(bound + 1)), [rule]);
  // A run that reported no slowest answer holds no bound.
  assert.deepEqual(failed(await slowest(Number.NaN)), [rule]);
});

Deno.test("checkResults() holds a rate the stack did not sustain to its answers, and to time and sending only when it is the lowest", async () => {
  const results = await quickResults();
  const low = results.endToEnd!.runs.at(-1)!;
  const overloaded = (run: RateRun): RateRun => ({
    ...run,
    sustained: false,
    load: { ...run.load, dropped: run.load.requests, slowestMs: 9_000 },
  });
  const high = { ...overloaded(low), offered: low.offered * 4 };
  const ladder = (runs: RateRun[]): BenchResults => ({
    ...results,
    endToEnd: { ...results.endToEnd!, runs },
  });
  // Past what the stack sustains, unsent requests and late answers are what "not sustained" means.
  assert.deepEqual(failed(checkResults(ladder([low, high]))), []);
  // A 503 only a fault explains still fails there.
  const refused = {
    ...high,
    refusals: { ...high.refusals, api: { ...high.refusals.api, unavailable: 1 } },
  };
  assert.equal(failed(checkResults(ladder([low, refused]))).length, 1);
  // The lowest rate must be carried whatever the run says of it.
  const lowest = "the lowest rate, which must be sustained";
  assert.deepEqual(failed(checkResults(ladder([overloaded(low), high]))), [
    unsentRule(low.offered),
    `End to end: ${low.offered} req/s (${lowest}): every answer within REDIS_TIMEOUT_MS + 100 ms = ${
      results.endToEnd!.redisTimeoutMs + ANSWER_SLACK_MS
    } ms from its due time (docs/delivery.md: every answer is prompt)`,
  ]);
});

Deno.test("checkResults() fails an overload run with an answer neither 202 nor 503", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const checks = checkResults({
    ...results,
    growth: {
      ...growth,
      overload: {
        ...growth.overload,
        load: { ...growth.overload.load, failed: 1 },
      },
    },
  });
  assert.equal(failed(checks).length, 1);
  assert.match(checks.find((c) => !c.ok)!.measured, /, 1 other or none; backlog/);
});

Deno.test("checkResults() fails the traefik phase on a non-202 or a 202 not queued", async () => {
  const results = await quickResults();
  const traefik = results.traefik!;
  const [course] = traefik.runs.course;
  const checks = checkResults({
    ...results,
    traefik: {
      ...traefik,
      runs: { ...traefik.runs, course: [{ ...course!, accepted: course!.accepted - 2 }] },
    },
  });
  // Two answers missing: not every answer was a 202, and the list holds more than were counted.
  assert.deepEqual(failed(checks), [
    "Traefik: course: every answer 202 (oha)",
    "Traefik: course: every 202 kept (users queued = 202s counted)",
  ]);
});

/** The captured run with its one queue-mode ingest run changed by `change`. */
async function withQueueRun(change: (run: IngestRun) => Partial<IngestRun>) {
  const results = await quickResults();
  const ingest = results.ingest!;
  const [queue] = ingest.runs.queue;
  return {
    ...results,
    ingest: { ...ingest, runs: { ...ingest.runs, queue: [{ ...queue!, ...change(queue!) }] } },
  };
}

Deno.test("checkResults() fails ingest on a non-202 answer or a 202 not kept", async () => {
  const broken = await withQueueRun((queue) => ({
    accepted: queue.requests - 3,
    kept: queue.requests - 100,
  }));
  assert.deepEqual(failed(checkResults(broken)), [
    "Ingest: queue: every answer 202",
    "Ingest: queue: every 202 kept (users queued = 202s counted)",
  ]);
});

Deno.test("checkResults() fails ingest on a duplicated push: more users queued than 202s counted", async () => {
  const duplicated = await withQueueRun((queue) => ({ kept: queue.accepted + 1 }));
  const checks = checkResults(duplicated);
  assert.deepEqual(failed(checks), [
    "Ingest: queue: every 202 kept (users queued = 202s counted)",
  ]);
  const [queue] = duplicated.ingest!.runs.queue;
  assert.equal(
    checks.find((c) => !c.ok)!.measured,
    `${queue!.accepted + 1} queued / ${queue!.accepted}`,
  );
});

Deno.test("checkResults() fails a drain that did not store every user or dead-lettered one", async () => {
  const results = await quickResults();
  const drain = results.drain!;
  const [first, ...rest] = drain.batch;
  const withBatch = (change: object) =>
    checkResults({ ...results, drain: { ...drain, batch: [{ ...first!, ...change }, ...rest] } });
  const rule = "Drain: every drain: every user stored, none dead-lettered";
  const short = withBatch({ stored: first!.users - 1 });
  assert.deepEqual(failed(short), [rule]);
  assert.match(
    short.find((c) => !c.ok)!.measured,
    new RegExp(
      `^batch ${first!.batchSize} × ${first!.replicas}: ${first!.users - 1} of ${
        first!.users
      } stored, 0 dead-lettered$`,
    ),
  );
  assert.deepEqual(failed(withBatch({ deadLettered: 1 })), [rule]);
  const growth = results.growth!;
  assert.deepEqual(
    failed(checkResults({
      ...results,
      growth: { ...growth, large: { ...growth.large, stored: growth.large.users + 1 } },
    })),
    ["Growth: every drain: every user stored, none dead-lettered"],
  );
});

Deno.test("checkResults() fails an overload that outgrew the bound or lost a 202", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const overload = (change: Partial<typeof growth.overload>) =>
    checkResults({
      ...results,
      growth: { ...growth, overload: { ...growth.overload, ...change } },
    });
  assert.deepEqual(failed(overload({ maxBacklog: growth.overload.maxLength + 1 })), [
    "Growth: overload: queue length ≤ QUEUE_MAX_LENGTH",
  ]);
  assert.deepEqual(failed(overload({ stored: growth.overload.load.accepted - 1 })), [
    "Growth: overload: stored = accepted",
  ]);
  assert.deepEqual(failed(overload({ stored: growth.overload.load.accepted })), []);
});

Deno.test("checkResults() fails an overload 503 other than a queue_full at QUEUE_MAX_LENGTH", async () => {
  const results = await quickResults();
  const growth = results.growth!;
  const { maxLength } = growth.overload;
  // 500 of the captured overload's answers made 503s, each a queue_full counted by the API.
  const overload = (
    refused: { full: number; unavailable?: number },
    maxBacklog = maxLength,
  ) =>
    checkResults({
      ...results,
      growth: {
        ...growth,
        overload: {
          ...growth.overload,
          load: { ...growth.overload.load, rejected: 500 },
          maxBacklog,
          refused: { unavailable: 0, unconfirmed: 0, ...refused },
        },
      },
    });
  const rule =
    "Growth: overload: every answer 202 or a 503 the API counted as queue_full, with the backlog at QUEUE_MAX_LENGTH";
  assert.deepEqual(failed(overload({ full: 500 })), []);
  assert.deepEqual(failed(overload({ full: 499 })), [rule]);
  assert.deepEqual(failed(overload({ full: 499, unavailable: 1 })), [rule]);
  // queue_full while the queue never reached its bound.
  assert.deepEqual(failed(overload({ full: 500 }, maxLength - 1)), [rule]);
});

Deno.test("checkResults() has nothing to check in a run that measured nothing, which fails", () => {
  const checks = checkResults(emptyResults());
  assert.deepEqual(checks, []);
  assert.equal(checksHeld(checks), false);
  assert.match(checksSummary(checks), /^FAILED: no check ran/);
});

Deno.test("checkResults() counts the course's list like the queue's", async () => {
  const results = await quickResultsWithComparisons();
  assert.deepEqual(failed(checkResults(results)), []);
  const rules = checkResults(results).filter((c) => c.phase === "Ingest").map((c) => c.rule)
    .filter((r) => r.startsWith("course"));
  assert.deepEqual(rules, [
    "course: every answer 202",
    "course: every 202 kept (users queued = 202s counted)",
  ]);
  const ingest = results.ingest!;
  const [course] = ingest.runs.course!;
  const lost: BenchResults = {
    ...results,
    ingest: {
      ...ingest,
      runs: { ...ingest.runs, course: [{ ...course!, kept: course!.kept - 1 }] },
    },
  };
  assert.deepEqual(failed(checkResults(lost)), [
    "Ingest: course: every 202 kept (users queued = 202s counted)",
  ]);
});

Deno.test("checkResults() fails the bulk phase on a non-202 or a user of a 202 not stored", async () => {
  const results = await quickResults();
  const bulk = bulkResult();
  const clean = checkResults({ ...results, bulk });
  assert.deepEqual(failed(clean), []);
  assert.equal(clean.filter((c) => c.phase === "Bulk").length, 2 * (1 + bulk.batches.length));
  const [first, ...rest] = bulk.batches;
  const partly = { ...first!, load: { ...first!.load, accepted: first!.load.accepted - 1 } };
  const short = { ...rest[0]!, stored: rest[0]!.stored - 1 };
  assert.deepEqual(
    failed(
      checkResults({ ...results, bulk: { ...bulk, batches: [partly, short, ...rest.slice(1)] } }),
    ),
    [
      "Bulk: POST /users/batch, 1 per request: every answer 202 (no fault injected, the bound far above the backlog)",
      "Bulk: POST /users/batch, 10 per request: stored = accepted users",
    ],
  );
});

Deno.test("checkResults() holds the bulk phase's open-model rates to stored = accepted users and the answer bound", async () => {
  const results = await quickResults();
  const base = results.endToEnd!.runs[0]!;
  const run = { ...base, usersPerRequest: 100, stored: base.load.accepted * 100 };
  const withOpen = (runs: (typeof run)[]) => ({
    ...results,
    bulk: {
      ...bulkResult(),
      open: {
        usersPerRequest: 100,
        closedLoopRequests: 1_000,
        runs,
        maxSustainedUsers: 0,
        queueMaxLength: 1e8,
        redisTimeoutMs: 1_000,
      },
    },
  });
  assert.deepEqual(failed(checkResults(withOpen([run]))), []);
  const lost = failed(checkResults(withOpen([{ ...run, stored: run.stored - 1 }])));
  assert.deepEqual(lost, [
    `Bulk: open model, ${run.offered} req/s of 100 users: stored = accepted users`,
  ]);
  const late = failed(
    checkResults(withOpen([{ ...run, load: { ...run.load, slowestMs: 1_101 } }])),
  );
  assert.equal(late.length, 1);
  assert.match(late[0]!, /every answer within REDIS_TIMEOUT_MS/);
  // The half-rate run read from the ladder is checked once, also once results.json made it a copy.
  const bulkChecks = (half: typeof run) => {
    const withHalf = withOpen([run]);
    const open = { ...withHalf.bulk.open, half };
    return checkResults({ ...withHalf, bulk: { ...withHalf.bulk, open } })
      .filter((c) => c.phase === "Bulk").length;
  };
  assert.equal(bulkChecks(structuredClone(run)), bulkChecks(run));
});
