/**
 * Writing one run's results as Markdown: the targets first, then a table per
 * phase with every figure next to its same-run floor, the profiles' top
 * frames, and how the figures were taken.
 *
 * @module
 */

import {
  BULK_FULL_CONNECTIONS_UP_TO,
  BULK_PARTS,
  type BulkPart,
  openRuns,
  pipelineMicrosPerUser,
  PROFILED_BATCH,
} from "./bulk.ts";
import { ANSWER_SLACK_MS, type Check, checkResults } from "./checks.ts";
import type { ProfileSummary } from "./cpu_profile.ts";
import {
  drainLabel,
  type DrainRun,
  FLOOR_BATCH,
  FLOOR_CONNECTIONS,
  FLOOR_OVERLAPS,
  type FloorRun,
} from "./drain.ts";
import { rssWhenDone, secondHalfSamples } from "./growth.ts";
import { UNSENT_SHARE_MAX } from "./end_to_end.ts";
import {
  apiAndRedisMicrosPerRequest,
  cpuMicrosPerRequest,
  INGEST_TARGETS,
  type IngestResult,
  type IngestRun,
  type IngestTarget,
  median,
  medianRun,
  pairedRatio,
  shareOfFloor,
} from "./ingest.ts";
import { formatCount } from "./progress.ts";
import type { BenchResults } from "./results.ts";
import type { TargetVerdict } from "./targets.ts";
import {
  BULK_CAPACITY_SIZE,
  bulkCapacityInputs,
  capacityInputs,
  type CapacityModel,
  capacityModel,
  formatBytes,
  formatRate,
  scalingRows,
  TIER_UNITS,
  TIERS,
} from "./capacity.ts";
import {
  FRONT_PARTS,
  FRONT_TARGETS,
  frontMicrosPerRequest,
  type FrontRun,
  type FrontTarget,
} from "./through_traefik.ts";

/** Cell alignment: left or right (numbers). */
export type Align = "left" | "right";

/**
 * A Markdown table. Pipes and line breaks in cells are escaped so a cell
 * cannot break the table.
 */
export function markdownTable(
  header: readonly string[],
  rows: readonly (readonly (string | number)[])[],
  align: readonly Align[] = [],
): string {
  const cell = (value: string | number) =>
    String(value).replaceAll("|", "\\|").replaceAll("\n", " ");
  const line = (cells: readonly (string | number)[]) => `| ${cells.map(cell).join(" | ")} |`;
  const rule = header.map((_, i) => (align[i] ?? "left") === "right" ? "---:" : "---");
  return [line(header), `| ${rule.join(" | ")} |`, ...rows.map(line)].join("\n");
}

/** A column of {@linkcode columnsTable}: its header, a row's cell, its alignment. */
type Column<R> = readonly [header: string, cell: (row: R) => string | number, align?: Align];

/** A Markdown table of `rows`, one cell per column; columns are right-aligned unless told. */
function columnsTable<R>(rows: readonly R[], columns: readonly Column<R>[]): string {
  return markdownTable(
    columns.map(([header]) => header),
    rows.map((row) => columns.map(([, cell]) => cell(row))),
    columns.map(([, , align = "right"]) => align),
  );
}

const pct = (ratio: number) => `${(ratio * 100).toFixed(0)}%`;
/** Milliseconds; "—" for a figure a run did not record (one from before it was measured). */
const ms = (value: number) => Number.isFinite(value) ? value.toFixed(value < 10 ? 2 : 1) : "—";
const cores = (value: number) => value.toFixed(2);

function verdictMark(met: boolean | undefined): string {
  return met === undefined ? "not evaluated" : met ? "**met**" : "**not met**";
}

function checksSection(checks: readonly Check[]): string {
  const failed = checks.filter((c) => !c.ok).length;
  return [
    failed === 0
      ? `All ${checks.length} checks held: what the pipeline answered and kept, which fails the run on any machine.`
      : `**${failed} of ${checks.length} checks failed**: what the pipeline answered and kept, which fails the run on any machine.`,
    "",
    markdownTable(
      ["Phase", "Check", "Measured", "Result"],
      checks.map((c) => [c.phase, c.rule, c.measured, c.ok ? "held" : "**FAILED**"]),
    ),
  ].join("\n");
}

function targetsSection(verdicts: readonly TargetVerdict[]): string {
  return markdownTable(
    ["Phase", "Target", "Measured", "Verdict"],
    verdicts.map((v) => [v.phase, v.target, v.measured, verdictMark(v.met)]),
  );
}

/** Each ingest target's name in the tables. */
const INGEST_LABELS: Readonly<Record<IngestTarget, string>> = {
  floor:
    "the HTTP floor (`http_floor.ts`: Deno.serve + Hono, 202 after reading the body, nothing else)",
  queue: "**API, queue mode**",
  no_redis:
    "diagnostic, not a floor: the API's app without Redis (`reference_server.ts`: metrics, validation, id; `accept` does nothing)",
  course: "the course's producer (`course_producer.ts`: LPUSH, nothing else)",
  direct:
    "the API's app, direct mode (`direct_server.ts`, the course's first version: an INSERT per request)",
};

/**
 * The comparison with the course: queue mode against the course's producer,
 * by req/s in the same rounds and by CPU per request of the API process and
 * of Redis, each alone and together (the target).
 */
function comparisonLines(ingest: IngestResult): string[] {
  const { queue, course } = ingest.runs;
  const micros = (runs: readonly IngestRun[], process: "serverCores" | "redisCores") =>
    cpuMicrosPerRequest(runs, process).toFixed(1);
  return [
    "",
    `**Against the course's producer.** Queue mode (${
      formatCount(median(queue.map((r) => r.requestsPerSecond)))
    } req/s) divided by it, round by round (the median of the per-round ratios: above 1× is faster); CPU per request is the median over the rounds of CPU time over requests answered, for the API process and for Redis (which only the measured server uses during its run).`,
    "",
    markdownTable(
      [
        "Compared with",
        "its req/s",
        "queue / it",
        "API CPU µs/request (queue vs it)",
        "Redis CPU µs/request (queue vs it)",
        "API + Redis µs/request: queue / it",
      ],
      [[
        "the course's producer",
        formatCount(median(course.map((r) => r.requestsPerSecond))),
        `${ingest.courseRatio.toFixed(2)}×`,
        `${micros(queue, "serverCores")} vs ${micros(course, "serverCores")}`,
        `${micros(queue, "redisCores")} vs ${micros(course, "redisCores")}`,
        `${(apiAndRedisMicrosPerRequest(queue) / apiAndRedisMicrosPerRequest(course)).toFixed(2)}×`,
      ]],
      ["left", "right", "right", "right", "right", "right"],
    ),
    "",
    "The course's producer is its chapter's `POST /users` as written: the name from the JSON body, LPUSHed as `{ name }` onto one list with ioredis' defaults, 202 \"Accepted\" — no content-type check, body limit, validation, id, envelope, queue bound or deadline, which the queue mode pays for. It runs directly here; section 1b measures it behind Traefik.",
  ];
}

function ingestSection(results: BenchResults): string {
  const ingest = results.ingest!;
  const { plan } = ingest;
  const floor = median(ingest.runs.floor.map((r) => r.requestsPerSecond));
  const targets = INGEST_TARGETS.map((target) => {
    const runs = ingest.runs[target];
    return { target, runs, run: medianRun(runs) };
  });
  const others = targets.filter(({ target }) => target !== "floor");
  const rounds = ingest.runs.floor.map((ref, i) => [
    i + 1,
    formatCount(ref.requestsPerSecond),
    ...others.flatMap(({ runs }) => [
      formatCount(runs[i]?.requestsPerSecond ?? 0),
      pct((runs[i]?.requestsPerSecond ?? 0) / ref.requestsPerSecond),
    ]),
  ]);
  const cpuPerRequest = (target: IngestTarget) =>
    median(ingest.runs[target].map((r) => r.serverCores / r.requestsPerSecond * 1e6));
  const kept = ingest.runs.queue.map((r) => `${r.kept}/${r.accepted}`).join(", ");
  const lost = ingest.runs.queue.filter((r) => r.kept < r.accepted).length;
  const extra = ingest.runs.queue.filter((r) => r.kept > r.accepted).length;
  const lines = [
    `One API process on a free loopback port; ${ingest.generator} in closed loop, ${plan.connections} connections, ${plan.seconds} s per run after ${plan.warmupSeconds} s of unmeasured warm-up; the ${targets.length} servers take turns, ${plan.rounds} round(s). Figures are medians over the rounds; the ratio is the median of the per-round ratios (each round's runs are seconds apart, so drift cancels).`,
    "",
    columnsTable(targets, [
      ["Server", ({ target }) => INGEST_LABELS[target], "left"],
      ["req/s", ({ runs }) => formatCount(median(runs.map((r) => r.requestsPerSecond)))],
      ["of the HTTP floor", ({ target }) => pct(shareOfFloor(ingest, target))],
      ["p50 ms", ({ run }) => ms(run.latencyMs.p50)],
      ["p99 ms", ({ run }) => ms(run.latencyMs.p99)],
      ["non-202", ({ runs }) => runs.reduce((sum, r) => sum + r.requests - r.accepted, 0)],
      ["server CPU µs/request", ({ runs }) => cpuMicrosPerRequest(runs, "serverCores").toFixed(1)],
      ["redis CPU µs/request", ({ runs }) => cpuMicrosPerRequest(runs, "redisCores").toFixed(1)],
      ["server cores", ({ run }) => cores(run.serverCores)],
      ["redis cores", ({ run }) => cores(run.redisCores)],
      ["postgres cores", ({ run }) => cores(run.postgresCores)],
    ]),
    "",
    markdownTable(
      [
        "Round",
        "floor req/s",
        ...others.flatMap(({ target }) => [`${target} req/s`, `${target}/floor`]),
      ],
      rounds,
      Array(2 + 2 * others.length).fill("right"),
    ),
    "",
    `By CPU per request, the steadier figure, queue mode costs the API ${
      cpuPerRequest("queue").toFixed(1)
    } µs per request against the HTTP floor's ${
      cpuPerRequest("floor").toFixed(1)
    } µs, and the API's app without Redis (a diagnostic: our code with the queue taken out, so never a target's reference) ${
      cpuPerRequest("no_redis").toFixed(1)
    } µs: what lies between the floor and the app is the app's own work, what lies between the app and queue mode is the queue's.`,
    "",
    `${
      lost === 0
        ? "Every 202 was kept"
        : `**${lost} of ${ingest.runs.queue.length} queue-mode runs kept fewer users than were answered 202**`
    }: users queued after each queue-mode run / 202s counted = ${kept}${
      extra > 0
        ? " (more than counted: the generator stopped counting with requests in flight, which the server still answered)"
        : ""
    }.`,
    "",
    `HTTP floor: ${
      formatCount(floor)
    } req/s is what \`Deno.serve\` + Hono sustain answering this request with 202 and doing nothing else, on this machine while the generator shares it; "cores" is CPU time during the run divided by its length (1.00 = one core busy), and "server CPU µs/request" is the server's CPU time divided by the requests it answered: the steadiest figure on a shared machine, since it does not depend on how much CPU the scheduler gave the server.`,
    ...comparisonLines(ingest),
  ];
  return lines.join("\n");
}

/** A setup's name in the traefik phase's tables. */
function frontLabel(target: FrontTarget, replicas: number): string {
  switch (target) {
    case "ceiling":
      return `Traefik's ceiling: the HTTP floor × ${replicas}`;
    case "queue":
      return `**our API, queue mode × ${replicas}** (the stack's defaults)`;
    case "course":
      return "the course's producer × 1 (LPUSH, nothing else)";
  }
}

function traefikSection(results: BenchResults): string {
  const t = results.traefik!;
  const { plan } = t;
  const micros = (runs: readonly FrontRun[], part: (typeof FRONT_PARTS)[number]) =>
    frontMicrosPerRequest(runs, part);
  const setups = FRONT_TARGETS.map((target) => {
    const runs = t.runs[target];
    return { target, runs, run: medianRun(runs) };
  });
  const partNames: Record<(typeof FRONT_PARTS)[number], string> = {
    generator: "oha",
    traefik: "Traefik",
    api: "API",
    redis: "Redis",
  };
  const rounds = t.runs.ceiling.map((ceiling, i) => [
    i + 1,
    formatCount(ceiling.requestsPerSecond),
    formatCount(t.runs.queue[i]?.requestsPerSecond ?? 0),
    formatCount(t.runs.course[i]?.requestsPerSecond ?? 0),
    `${
      ((t.runs.queue[i]?.requestsPerSecond ?? 0) /
        (t.runs.course[i]?.requestsPerSecond ?? 1)).toFixed(2)
    }×`,
  ]);
  return [
    `Each setup behind a Traefik of its own, configured as the native stack's (traefik/traefik.yml, the file-provider route with its /readyz health check); oha in closed loop (${plan.connections} connections, each request sent when the previous answer came back), ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up; the setups take turns, ${plan.rounds} round(s). The ceiling is what Traefik passes to the HTTP floor (\`http_floor.ts\`: 202 after reading the body, nothing else): every other setup is read as a share of it, and the end-to-end ladder climbs to it. CPU µs per request is each process's CPU time over the requests answered (the median over the rounds); "Traefik + API + Redis" is what one user costs on the way in.`,
    "",
    columnsTable(setups, [
      ["Setup", ({ target }) => frontLabel(target, plan.replicas), "left"],
      ["req/s", ({ runs }) => formatCount(median(runs.map((r) => r.requestsPerSecond)))],
      [
        "of ceiling",
        ({ target, runs }) => pct(target === "ceiling" ? 1 : pairedRatio(runs, t.runs.ceiling)),
      ],
      ["p50 ms", ({ run }) => ms(run.latencyMs.p50)],
      ["p99 ms", ({ run }) => ms(run.latencyMs.p99)],
      ["non-202", ({ runs }) => runs.reduce((sum, r) => sum + r.requests - r.accepted, 0)],
      ...FRONT_PARTS.map((part): Column<(typeof setups)[number]> => [
        `${partNames[part]} µs/req`,
        ({ runs }) => micros(runs, part).toFixed(1),
      ]),
      [
        "Traefik + API + Redis µs/req",
        ({ runs }) =>
          (micros(runs, "traefik") + micros(runs, "api") + micros(runs, "redis")).toFixed(1),
      ],
    ]),
    "",
    markdownTable(
      ["Round", "ceiling req/s", "our API req/s", "course req/s", "ours / course"],
      rounds,
      Array(5).fill("right"),
    ),
    "",
    `**Against the course's producer behind the same Traefik**: our API at the stack's defaults took ${
      t.courseRatio.toFixed(2)
    }× the course's req/s (median of the per-round ratios), ${
      pct(t.ceilingRatio)
    } of Traefik's ceiling of ${formatCount(t.ceiling)} req/s. ${
      keptSentence(t)
    } oha's own CPU is in the table: it is what the load costs to make on this machine, shared with everything else.`,
  ].join("\n");
}

/**
 * What the lists held after each run of the traefik phase against the 202s
 * oha counted (the check in checks.ts, which fails the run when they differ).
 */
function keptSentence(t: NonNullable<BenchResults["traefik"]>): string {
  const lists = [["our API's", t.runs.queue], ["the course's", t.runs.course]] as const;
  const counts = lists.map(([whose, runs]) =>
    `${whose} ${runs.map((r) => `${formatCount(r.kept)}/${formatCount(r.accepted)}`).join(", ")}`
  ).join("; ");
  const runs = lists.flatMap(([, runs]) => runs);
  const off = runs.filter((r) => r.kept !== r.accepted).length;
  return off === 0
    ? `Both lists were checked after each run: every 202 was queued (users queued / 202s counted, by round: ${counts}).`
    : `**${off} of ${runs.length} runs left their list holding other than the 202s counted** (users queued / 202s counted, by round: ${counts}).`;
}

/**
 * Each side's CPU per user, process by process: the way in through Traefik
 * (traefik phase) and the way out into the table (drain phase), ours next to
 * the course's; empty when either phase did not run.
 */
function courseCostSection(results: BenchResults): string | undefined {
  const t = results.traefik;
  const drain = results.drain;
  if (!t || !drain) return undefined;
  const batch = drain.batch.find((r) =>
    r.mode === "batch" && r.batchSize === FLOOR_BATCH && r.replicas === 1
  );
  const perRow = (run: DrainRun, cores: number) => cores / run.rowsPerSecond * 1e6;
  const ways = (runs: readonly FrontRun[], out: DrainRun | undefined) => {
    const parts = [
      frontMicrosPerRequest(runs, "traefik"),
      frontMicrosPerRequest(runs, "api"),
      frontMicrosPerRequest(runs, "redis"),
      out ? perRow(out, out.consumerCores) : Number.NaN,
      out ? perRow(out, out.redisCores) : Number.NaN,
      out ? perRow(out, out.postgresCores) : Number.NaN,
    ];
    return [...parts, parts.reduce((sum, p) => sum + p, 0)];
  };
  const columns = [
    ["ours, single mode", ways(t.runs.queue, drain.single)],
    ...(batch ? [["ours, batch 1000 (the default)", ways(t.runs.queue, batch)] as const] : []),
    ["the course's", ways(t.runs.course, drain.course)],
  ] as const;
  const labels = [
    "Traefik",
    "API (all replicas)",
    "Redis, taking the user in",
    "consumer",
    "Redis, handing the user out",
    "PostgreSQL",
    "**total per user**",
  ];
  return [
    "CPU µs per user, process by process: the way in is the traefik phase (our API at the stack's defaults, the course's producer; per request answered), the way out is the drain phase (per row stored; ours in single mode, the mode compared with the course's one-INSERT-per-item consumer, and in batch mode, the stack's default). Measured in separate runs of the same benchmark, each process's CPU time over the users it handled.",
    "",
    markdownTable(
      ["Process", ...columns.map(([name]) => name)],
      labels.map((label, i) => [
        label,
        ...columns.map(([, values]) => {
          const v = values[i] ?? Number.NaN;
          return Number.isFinite(v) ? v.toFixed(1) : "";
        }),
      ]),
      ["left", ...Array<Align>(columns.length).fill("right")],
    ),
  ].join("\n");
}

/** What each target rate of `model` needs, tier by tier. */
function targetsTable(model: CapacityModel): string {
  const { options: o } = model;
  return columnsTable(model.targets, [
    ["users/s", (t) => formatRate(t.rate)],
    ["Traefik cores", (t) => formatRate(t.cores.traefik)],
    ["API replicas", (t) => t.apiReplicas],
    [
      "QUEUE_SHARDS (CPU, memory)",
      (t) => `${t.shards} (${t.shardsForCpu}, ${t.shardsForMemory})`,
    ],
    ["consumers", (t) => t.consumers],
    ["PostgreSQL cores", (t) => formatRate(t.cores.postgres)],
    ["WAL MiB/s", (t) => formatRate(t.walBytesPerSecond / 2 ** 20)],
    ["PostgreSQL primaries", (t) => t.postgresPrimaries],
    ["all cores", (t) => formatRate(t.totalCores)],
    [`${o.nodeCores}-core nodes (all but PostgreSQL)`, (t) => t.nodes],
    [`Redis backlog of ${o.backlogSeconds} s`, (t) => formatBytes(t.backlogBytes)],
  ]);
}

/** The capacity model from this run's costs; undefined when the run lacks them. */
function capacitySection(results: BenchResults): string | undefined {
  const inputs = capacityInputs(results);
  if (inputs === undefined) return undefined;
  const model = capacityModel(inputs);
  const { options: o } = model;
  const util = pct(o.utilisation);
  const units = [1, 2, 4, 8, 16, 32, 64];
  const scaling = scalingRows(model, units);
  return [
    `Costs per user measured in this run (the traefik phase's runs of our API: Traefik, API replicas and Redis per request; the drain of batch ${FLOOR_BATCH} × 1: consumer, PostgreSQL and Redis per row, Redis memory per queued user), scaled linearly per tier with each unit used up to ${util}. A Deno process (an API replica, a consumer) runs its JavaScript on one thread, so it holds about one core; a Redis shard executes commands on one thread; PostgreSQL is one primary that takes every row. Consumers are counted from the rows/s one consumer stored, not from its CPU: it spends most of its time waiting on round trips.`,
    "",
    tierTable(model),
    "",
    `All tiers: ${model.totalMicros.toFixed(1)} µs of CPU per user (Redis: ${
      inputs.redisSplit.ingest.toFixed(1)
    } µs for the push, ${
      inputs.redisSplit.drain.toFixed(1)
    } µs for fetch and acknowledgement); Redis holds ${
      inputs.redisBytesPerUser.toFixed(0)
    } bytes per queued user, and PostgreSQL writes ${
      inputs.walBytesPerUser.toFixed(0)
    } bytes of WAL per stored user. One machine of 2 cores running every tier would take about ${
      formatRate(model.perMachine(2) / o.utilisation)
    } users/s flat out${
      results.endToEnd
        ? ` (the end-to-end phase sustained ${
          formatRate(results.endToEnd.maxSustained)
        } req/s, with the load generator on the same cores)`
        : ""
    }.`,
    "",
    `While the stateless tiers (Traefik, API replicas, consumers) scale out, the first limit is ${
      model.firstLimit === "redis"
        ? `one Redis shard, at ${
          formatRate(model.oneShardLimit)
        } users/s: past it, \`QUEUE_SHARDS=K\` spreads the queue over K Redis Cluster masters. PostgreSQL's one primary (${o.maxPrimaryCores} cores) follows at ${
          formatRate(model.onePrimaryLimit)
        } users/s.`
        : `PostgreSQL's one primary (${o.maxPrimaryCores} cores), at ${
          formatRate(model.onePrimaryLimit)
        } users/s, before one Redis shard at ${formatRate(model.oneShardLimit)} users/s.`
    }`,
    "",
    targetsTable(model),
    "",
    `Throughput (users/s) by units of each tier, linear until a unit is full; PostgreSQL's cores stop adding once its one primary is full (${o.maxPrimaryCores} cores, or ${
      formatBytes(o.primaryWalBytesPerSecond)
    }/s of WAL):`,
    "",
    markdownTable(
      ["Tier (unit)", ...units.map(String)],
      TIERS.map((tier) => [
        `${tier} (${TIER_UNITS[tier]})`,
        ...units.map((n) =>
          formatRate(scaling.find((r) => r.tier === tier && r.units === n)!.usersPerSecond)
        ),
      ]),
      ["left", ...Array<Align>(units.length).fill("right")],
    ),
    "",
    `Assumptions: costs per user stay what they were here (same code, same batch size, loopback network: a real network adds latency, which the consumers' count absorbs, and little CPU); a consumer near its capacity takes full batches, as in the drain it was measured in (below it, batches are smaller and cost more per user, as the end-to-end phase's CPU per request shows, which only matters while it has CPU to spare); with \`QUEUE_SHARDS=K\` each shard costs per user what the one Redis did (the API's grouped pushes are split K ways, so a little more); each tier scales linearly with its units; a unit is used up to ${util}; the Redis backlog to hold is ${o.backlogSeconds} s of the rate (a consumer outage), ${
      formatBytes(o.shardMemoryBytes)
    } per shard; one PostgreSQL primary gets at most ${o.maxPrimaryCores} cores and writes at most ${
      formatBytes(o.primaryWalBytesPerSecond)
    }/s of WAL, and its per-row cost does not grow with them (WAL insertion and index contention make that optimistic near the top). Past one primary: partition \`users\` (by hash of id) so that each consumer batch goes to one partition, batch across partitions, or a distributed PostgreSQL (Citus-style sharding on id).`,
    ...bulkCapacityLines(results),
  ].join("\n");
}

/** The model again for clients sending {@linkcode BULK_CAPACITY_SIZE} users per request. */
function bulkCapacityLines(results: BenchResults): string[] {
  const inputs = bulkCapacityInputs(results);
  if (inputs === undefined) return [];
  const model = capacityModel(inputs);
  return [
    "",
    `### At ${BULK_CAPACITY_SIZE} users per request`,
    "",
    `The same model with every tier's CPU per user from the bulk phase's run of \`POST /users/batch\` with ${BULK_CAPACITY_SIZE} users (Traefik, API replicas, Redis, consumers and PostgreSQL measured together, from the load's start to the last user stored); a consumer's rows/s, Redis bytes and WAL per user as above.`,
    "",
    tierTable(model),
    "",
    `All tiers: ${model.totalMicros.toFixed(1)} µs of CPU per user.`,
    "",
    targetsTable(model),
  ];
}

/** Each tier's CPU per user and the users/s one unit of it carries, as the capacity model has them. */
function tierTable(model: CapacityModel): string {
  return markdownTable(
    ["Tier", "CPU µs per user", "users/s per unit", "unit"],
    TIERS.map((tier) => [
      tier,
      model.inputs.micros[tier].toFixed(1),
      formatRate(model.unitRates[tier]),
      TIER_UNITS[tier],
    ]),
    ["left", "right", "right", "left"],
  );
}

function drainSection(results: BenchResults): string {
  const drain = results.drain!;
  const floor = drain.floorRowsPerSecond;
  const single = drain.single.rowsPerSecond;
  type Row = (FloorRun | DrainRun) & { readonly label: string };
  const rows: Row[] = [
    ...drain.floors.map((r, i) => ({
      ...r,
      label: i === 0 ? "drain floor (before)" : "drain floor (after)",
    })),
    ...[drain.single, drain.course, ...drain.batch].map((r) => ({ ...r, label: drainLabel(r) })),
  ];
  // A consumers' figure: blank for the floors, which run none.
  const ofDrain = (cell: (run: DrainRun) => string) => (row: Row) => "mode" in row ? cell(row) : "";
  const perRow = (used: number, run: DrainRun) => (used / run.rowsPerSecond * 1e6).toFixed(1);
  return [
    `Each drain: the table truncated, the consumers started (\`deno.json\`'s consumer task with \`CONSUMER_MODE\`/\`BATCH_SIZE\`) and warmed up on a few thousand users (connected, statement prepared, code compiled), the table checkpointed, then ${
      formatCount(drain.plan.users)
    } users pushed to a staging list (the API's push script, 1000 per push) and RENAMEd onto the queue in one step. Timed from the first batch taken until the queue and every processing list are empty (the last batch committed and acknowledged); then the users stored and dead-lettered are counted (a check: every user stored, none dead-lettered). Single mode drains a smaller backlog of ${
      formatCount(drain.plan.singleUsers)
    } users (one row per round trip); rows/s is comparable. The drain floor inserts the same number of rows from memory, ${
      drain.floors[0]?.batch ?? FLOOR_BATCH
    } rows per statement (an unnest insert that skips stored ids, its arrays built before the clock starts), over ${FLOOR_CONNECTIONS} warmed-up connections as a consumer opens, once with each of ${
      FLOOR_OVERLAPS.join(", ")
    } statements in flight, keeping the fastest (${
      drain.floors.map((f) => f.overlap).join(" and ")
    } in flight here), before and after the consumers' runs; their mean is the 100%. Its statement and overlaps are its own, so a change to the consumer moves the consumer's figure, never the floor. Cores are CPU time during the drain over its length, for the consumers, all of PostgreSQL's processes and Redis.`,
    "",
    columnsTable(rows, [
      ["Setup", (r) => r.label, "left"],
      ["users", (r) => formatCount(r.users)],
      ["seconds", (r) => r.seconds.toFixed(2)],
      ["rows/s", (r) => formatCount(r.rowsPerSecond)],
      ["of the drain floor", (r) => pct(r.rowsPerSecond / floor)],
      [
        "of single",
        ofDrain((run) =>
          run.mode === "single"
            ? "1×"
            : `${(run.rowsPerSecond / single).toFixed(run.mode === "course" ? 2 : 0)}×`
        ),
      ],
      ["consumer cores", ofDrain((run) => cores(run.consumerCores))],
      ["postgres cores", ofDrain((run) => cores(run.postgresCores))],
      ["redis cores", ofDrain((run) => cores(run.redisCores))],
      ["consumer µs/row", ofDrain((run) => perRow(run.consumerCores, run))],
      ["postgres µs/row", ofDrain((run) => perRow(run.postgresCores, run))],
      ["redis µs/row", ofDrain((run) => perRow(run.redisCores, run))],
      ["redis B/user", ofDrain((run) => run.redisBytesPerUser.toFixed(0))],
      ["peak RSS MiB", ofDrain((run) => run.peakRssMiB.toFixed(0))],
    ]),
    "",
    `**Against the course's consumer**: \`course_consumer.ts\`, the chapter's loop — BRPOP one item, INSERT its name into the course's own table (\`id serial, name\`), repeat; no processing list, acknowledgement, recovery or dead letters — drained the same ${
      formatCount(drain.course.users)
    } users right after single mode, timed the same way (from the first item taken until the list is empty and every row is in). Single mode stored ${
      (drain.single.rowsPerSecond / drain.course.rowsPerSecond).toFixed(2)
    }× its rows/s. Per row, "redis B/user" is the memory the backlog took in Redis (the list and, for ours, the status index) over the users in it.`,
  ].join("\n");
}

function endToEndSection(results: BenchResults): string {
  const e2e = results.endToEnd!;
  const top = e2e.runs.find((r) => r.offered === e2e.maxSustained);
  type Run = (typeof e2e.runs)[number];
  const parts = [
    ["oha", "generator"],
    ["traefik", "traefik"],
    ["API replicas", "api"],
    ["consumers", "consumers"],
    ["redis", "redis"],
    ["postgres", "postgres"],
  ] as const;
  const offered: Column<Run> = ["offered req/s", (r) => formatCount(r.offered)];
  return [
    `The native stack (\`tools/harness/\`: Traefik → ${e2e.plan.servers} API replicas → Redis → ${e2e.plan.consumers} consumers → PostgreSQL, project.env's settings) on free loopback ports. Load: ${e2e.generator}, open model — a fixed request rate (\`-q\`) whatever the latency, \`--latency-correction\` (a request's latency counts from when it was due) — for ${e2e.plan.seconds} s per rate. The rates are ${
      e2e.plan.fractions.map((f) => `${f * 100}%`).join(", ")
    } of Traefik's ceiling, ${formatCount(e2e.ceiling)} req/s (${
      e2e.ceilingSource === "own run"
        ? "measured by this phase: the HTTP floor behind Traefik, oha in closed loop"
        : "the traefik phase's median"
    }): the rate Traefik itself passes on this machine, so rates the stack cannot sustain are measured too (their excess waits in the queue, and every 202 must still be stored). Between rates the backlog drains and the table is truncated. Stored/s counts the rows stored by the time of the last enqueue, over the first-to-last-enqueue window; latency is \`stored_at - enqueued_at\` of every row, in SQL. Each 503 is given its cause from a record: Traefik's own (no replica ready) by its plain-text body in oha's record of every answer (\`--db-url\`), the API's by the code its replicas counted (\`users_pipeline_enqueue_rejections_total\` by reason). No fault is injected, so below the ceiling every answer must be a 202, or a 503 \`queue_full\` once the backlog reached QUEUE_MAX_LENGTH (${
      formatCount(e2e.queueMaxLength)
    }): any other 503 fails the run, recorded or not, as do, at the lowest rate, more than ${
      UNSENT_SHARE_MAX * 100
    }% of the requests not sent, and there and at every sustained rate an answer slower than REDIS_TIMEOUT_MS + ${ANSWER_SLACK_MS} ms (${
      e2e.redisTimeoutMs + ANSWER_SLACK_MS
    } ms, from its due time: docs/delivery.md's "Every answer is prompt"). Sustained = ≥ 99% of the requests sent answered 202 and stored/s ≥ 98% of accepted/s, with oha having sent ≥ ${
      100 - UNSENT_SHARE_MAX * 100
    }% of what was asked ("not sent": requests it could not send in the time, with every connection busy; the \`oha\` CPU column shows what the load cost to make, the \`machine\` column how busy the machine was, other tenants included).`,
    "",
    `Highest sustained rate: **${formatCount(e2e.maxSustained)} req/s** offered${
      top ? ` (${formatCount(top.acceptedPerSecond)} accepted/s)` : ""
    }.`,
    "",
    columnsTable(e2e.runs, [
      offered,
      ["accepted/s", (r) => formatCount(r.acceptedPerSecond)],
      ["stored/s", (r) => formatCount(r.storedPerSecond)],
      ["stored/accepted", (r) => pct(r.storedPerSecond / Math.max(r.acceptedPerSecond, 1e-9))],
      ["max backlog", (r) => formatCount(r.maxBacklog)],
      ["p50 ms", (r) => ms(r.latencyMs.p50)],
      ["p99 ms", (r) => ms(r.latencyMs.p99)],
      ["max ms", (r) => ms(r.latencyMs.max)],
      ["not sent", (r) => r.load.dropped],
      ["slowest answer ms", (r) => ms(r.load.slowestMs)],
      ["non-202", (r) => r.load.rejected + r.load.failed],
      [
        "503s by cause",
        ({ load, refusals: { traefik, api, unexplained } }) =>
          load.rejected === 0
            ? "—"
            : `Traefik ${traefik}, full ${api.full}, unavailable ${api.unavailable}, unconfirmed ${api.unconfirmed}, unexplained ${unexplained}`,
        "left",
      ],
      [
        "202s stored",
        (r) => r.stored === r.load.accepted ? "all" : `${r.stored}/${r.load.accepted}`,
      ],
      ["sustained", (r) => r.sustained ? "yes" : "no"],
    ]),
    "",
    "CPU during each run, in cores (2.00 = the whole machine; `machine` includes everything else running on it):",
    "",
    columnsTable(e2e.runs, [
      offered,
      ...parts.map(([name, part]): Column<Run> => [name, (r) => cores(r.cores[part])]),
      ["machine", (r) => cores(r.cores.machine)],
    ]),
    "",
    "The same as CPU µs per request accepted (each part's CPU time over the 202s of the run): what one user cost each process in the whole pipeline at that rate, next to the isolated costs the capacity model uses.",
    "",
    columnsTable(e2e.runs, [
      offered,
      ...parts.map(([name, part]): Column<Run> => [
        name,
        (r) => (r.cores[part] / Math.max(r.acceptedPerSecond, 1e-9) * 1e6).toFixed(1),
      ]),
    ]),
  ].join("\n");
}

/** The course's design on the same ladder, when the phase ran it. */
function courseEndToEndSection(results: BenchResults): string | undefined {
  const course = results.endToEnd?.course;
  if (course === undefined) return undefined;
  type Run = (typeof course.runs)[number];
  const parts = [
    ["oha", "generator"],
    ["traefik", "traefik"],
    ["producer", "api"],
    ["consumer", "consumers"],
    ["redis", "redis"],
    ["postgres", "postgres"],
  ] as const;
  const offered: Column<Run> = ["offered req/s", (r) => formatCount(r.offered)];
  return [
    `The course's design at the same rates, after the stack's ladder and on its Redis and PostgreSQL: the course's producer (\`course_producer.ts\`, ${course.producers} replica) behind a Traefik configured as the stack's, and the course's consumer (\`course_consumer.ts\`, ${course.consumers}: BRPOP one item, INSERT it). Stored/s is the rows in the course's table when oha ended over the run's length (the course's table has no enqueue time); sustained as for the stack. The ladder stops at the first rate not sustained: every rate above it is not sustained either. The course's design may lose a user by design (an item taken is gone if its consumer dies before the INSERT); no fault is injected, and stored against accepted is shown as measured, not enforced.`,
    "",
    `Highest sustained rate: **${
      formatCount(course.maxSustained)
    } req/s** offered, against the stack's ${formatCount(results.endToEnd!.maxSustained)}.`,
    "",
    columnsTable(course.runs, [
      offered,
      ["accepted/s", (r) => formatCount(r.acceptedPerSecond)],
      ["stored/s", (r) => formatCount(r.storedPerSecond)],
      ["max backlog", (r) => formatCount(r.maxBacklog)],
      ["not sent", (r) => r.load.dropped],
      ["p99 answer ms", (r) => ms(r.load.latencyMs.p99)],
      ["non-202", (r) => r.load.rejected + r.load.failed],
      [
        "202s stored",
        (r) => r.stored === r.load.accepted ? "all" : `${r.stored}/${r.load.accepted}`,
      ],
      ["sustained", (r) => r.sustained ? "yes" : "no"],
    ]),
    "",
    "CPU µs per request accepted, each part's CPU over the run's 202s:",
    "",
    columnsTable(course.runs, [
      offered,
      ...parts.map(([name, part]): Column<Run> => [
        name,
        (r) => (r.cores[part] / Math.max(r.acceptedPerSecond, 1e-9) * 1e6).toFixed(1),
      ]),
    ]),
  ].join("\n");
}

/** The bulk phase's open-model ladder, when it ran. */
function bulkOpenLines(bulk: NonNullable<BenchResults["bulk"]>): string[] {
  const open = bulk.open;
  if (open === undefined) return [];
  const n = open.usersPerRequest;
  type Run = (typeof open.runs)[number];
  const runs = openRuns(open);
  return [
    "",
    `End to end, open model, ${n} users per request: oha at fixed request rates (\`-q\`, \`--latency-correction\`), ${bulk.plan.openSeconds} s each, at ${
      bulk.plan.openFractions.map((f) => `${f * 100}%`).join(", ")
    } of the closed loop's ${
      formatCount(open.closedLoopRequests)
    } req/s at that size, then at half the highest sustained rate; measured as the end-to-end phase measures a rate (stored/s over the first-to-last-enqueue window, latency \`stored_at - enqueued_at\` from the table, sustained = ≥ 99% answered 202, stored/s ≥ 98% of accepted/s, ≥ ${
      100 - UNSENT_SHARE_MAX * 100
    }% sent). Highest sustained: **${formatCount(open.maxSustainedUsers)} users/s**.`,
    "",
    columnsTable(runs, [
      ["offered req/s", (r: Run) => formatCount(r.offered)],
      ["users/s offered", (r: Run) => formatCount(r.offered * n)],
      ["accepted users/s", (r: Run) => formatCount(r.acceptedPerSecond)],
      ["stored/s", (r: Run) => formatCount(r.storedPerSecond)],
      ["max backlog", (r: Run) => formatCount(r.maxBacklog)],
      ["p50 ms", (r: Run) => ms(r.latencyMs.p50)],
      ["p99 ms", (r: Run) => ms(r.latencyMs.p99)],
      ["not sent", (r: Run) => r.load.dropped],
      ["slowest answer ms", (r: Run) => ms(r.load.slowestMs)],
      ["non-202", (r: Run) => r.load.rejected + r.load.failed],
      [
        "users stored",
        (r: Run) => r.stored === r.load.accepted * n ? "all" : `${r.stored}/${r.load.accepted * n}`,
      ],
      ["sustained", (r: Run) => r.sustained ? "yes" : "no"],
    ]),
  ];
}

function bulkSection(results: BenchResults): string {
  const bulk = results.bulk!;
  const { plan } = bulk;
  type Run = (typeof bulk.batches)[number];
  const runs = [bulk.single, ...bulk.batches];
  const label: Column<Run> = [
    "request",
    (r) => r.path === "/users" ? "POST /users" : `batch of ${r.usersPerRequest}`,
    "left",
  ];
  const names: Readonly<Record<BulkPart, string>> = {
    traefik: "traefik",
    api: "API replicas",
    redis: "redis",
    consumers: "consumers",
    postgres: "postgres",
    generator: "oha",
  };
  return [
    `The native stack (Traefik → ${plan.servers} API replicas → Redis → ${plan.consumers} consumers → PostgreSQL, project.env's settings but QUEUE_MAX_LENGTH, set far above what a run queues) loaded through Traefik by ${bulk.generator} in closed loop, ${plan.connections} connections up to ${BULK_FULL_CONNECTIONS_UP_TO} users per request and above it as many as keep the same users in flight (a closed loop always has a request in the API on every connection: more batches of 1000 at once than two replicas finish within REDIS_TIMEOUT_MS would measure the generator's queue, answered by the API's deadline), ${plan.seconds} s per run after ${plan.warmupSeconds} s of warm-up (drained and the table truncated before the run): \`POST /users\` with one user, then \`POST /users/batch\` with a JSON array of ${
      plan.usersPerRequest.join(", ")
    } users. The consumers drain throughout; each tier's CPU is read from the start of the load until the last accepted user is stored, and divided by the users stored, so a tier's µs per user is its whole cost for a user, ingest and drain. Users/s is the users in the 202s over oha's run. The pipeline is every tier but the load generator.`,
    "",
    columnsTable(runs, [
      label,
      ["users/s", (r) => formatCount(r.usersPerSecond)],
      ["req/s", (r) => formatCount(r.requestsPerSecond)],
      ["× POST /users req/s", (r) => (r.usersPerSecond / bulk.single.requestsPerSecond).toFixed(1)],
      ["p50 ms", (r) => ms(r.load.latencyMs.p50)],
      ["p99 ms", (r) => ms(r.load.latencyMs.p99)],
      ["connections", (r) => r.connections],
      [
        "non-202",
        (r) =>
          r.load.rejected === 0
            ? r.load.requests - r.load.accepted
            : `${
              r.load.requests - r.load.accepted
            } (API: ${r.refused.full} full, ${r.refused.unavailable} unavailable, ${r.refused.unconfirmed} unconfirmed)`,
      ],
      [
        "users stored",
        (r) => r.stored === r.acceptedUsers ? `all ${r.stored}` : `${r.stored}/${r.acceptedUsers}`,
      ],
      ["load to stored s", (r) => r.seconds.toFixed(1)],
      ["machine cores", (r) => cores(r.machineCores)],
    ]),
    "",
    "CPU µs per user stored, by tier:",
    "",
    columnsTable(runs, [
      label,
      ...BULK_PARTS.map((
        part,
      ): Column<Run> => [names[part], (r) => r.microsPerUser[part].toFixed(1)]),
      ["pipeline", (r) => pipelineMicrosPerUser(r).toFixed(1)],
    ]),
    ...bulkOpenLines(bulk),
  ].join("\n");
}

function growthSection(results: BenchResults): string {
  const { small, large, overload, plan } = results.growth!;
  const secondHalf = (run: DrainRun) => {
    const mib = secondHalfSamples(run.rssSamples).map((s) => s.mib);
    return mib.length ? `${Math.min(...mib).toFixed(0)}–${Math.max(...mib).toFixed(0)}` : "";
  };
  const { load } = overload;
  return [
    `One consumer (batch mode, BATCH_SIZE 1000) drains each backlog in a fresh process, warmed up first as in the drain phase; RSS is the Deno process's VmRSS, sampled every 250 ms. To compare like with like, the larger drain's RSS is also read at the moment it had stored as many rows as the smaller drain in all (V8 grows its heap with the work done, whatever the backlog); the backlog itself stays in Redis.`,
    "",
    columnsTable([small, large], [
      ["Backlog", (run) => formatCount(run.users)],
      ["rows/s", (run) => formatCount(run.rowsPerSecond)],
      ["rows/s vs smaller", (run) => pct(run.rowsPerSecond / small.rowsPerSecond)],
      [
        `RSS after ${formatCount(small.users)} rows MiB`,
        (run) => rssWhenDone(run.rssSamples, small.users).toFixed(0),
      ],
      ["peak RSS MiB", (run) => run.peakRssMiB.toFixed(0)],
      ["RSS over 2nd half MiB", secondHalf],
    ]),
    "",
    `API under 2× overload: one API (queue mode, QUEUE_MAX_LENGTH=${plan.overloadMaxLength}) and one single-mode consumer, which drained ${
      formatCount(overload.drainRate)
    } users/s just before; ${overload.generator} offered twice that, ${
      formatCount(overload.offeredRate)
    } req/s (open model), for ${plan.overloadSeconds} s. RSS sampled every 500 ms.`,
    "",
    columnsTable([overload], [
      ["offered/s", (o) => formatCount(o.offeredRate)],
      ["accepted/s", () => formatCount(load.accepted / load.seconds)],
      ["503/s", () => formatCount(load.rejected / load.seconds)],
      ["failed", () => load.failed],
      ["stored/accepted", (o) => `${o.stored}/${load.accepted}`],
      ["not sent", () => load.dropped],
      ["p99 ms", () => ms(load.latencyMs.p99)],
      ["max backlog", (o) => `${formatCount(o.maxBacklog)} / ${formatCount(o.maxLength)}`],
      ["RSS 2nd quarter MiB", (o) => o.earlyRssMiB.toFixed(0)],
      ["RSS last quarter MiB", (o) => o.lateRssMiB.toFixed(0)],
      ["peak MiB", (o) => o.peakRssMiB.toFixed(0)],
    ]),
  ].join("\n");
}

function profileTables(title: string, profile: ProfileSummary): string {
  const table = (rows: ProfileSummary["frames"], label: string) =>
    markdownTable(
      [label, "self ms", "share of busy"],
      rows.map((r) => [`\`${r.label}\``, r.selfMs.toFixed(0), pct(r.share)]),
      ["left", "right", "right"],
    );
  return [
    `### ${title}`,
    "",
    `${(profile.totalMs / 1000).toFixed(1)} s sampled on the main thread, idle ${
      pct(profile.idleShare)
    } of it (waiting on sockets). Shares below are of the busy time.`,
    "",
    table(profile.origins, "Origin"),
    "",
    table(profile.frames, "Function (self time)"),
  ].join("\n");
}

/** The whole report. */
export function renderReport(results: BenchResults, verdicts: readonly TargetVerdict[]): string {
  const { run } = results;
  const versions = Object.entries(run.versions).map(([tool, v]) => `${tool} ${v}`).join(", ");
  const parts = [
    `# Benchmark: the pipeline against same-run floors (${run.variant} run)`,
    "",
    `Run ${run.startedAt}, ${
      (run.seconds / 60).toFixed(1)
    } min, ${run.cores} cores, 1-min load average ${
      run.loadBefore.toFixed(2)
    } before it began; ${versions}. Generated by \`tools/bench/main.ts\`${
      run.variant === "quick"
        ? " with `--quick` (small sizes, short runs: a smoke test of the harness, not evidence)"
        : ""
    }.`,
    "",
    `Absolute figures drift on a shared ${run.cores}-core machine, so every figure is paired with a floor measured in the same run (what the runtime or the database cannot beat: a bare \`Deno.serve\` + Hono handler, Traefik in front of it, an insert from memory over a consumer's connections) or with the course's own code, and the ratio is the headline. Every process is real: Redis and PostgreSQL as the native stack runs them, our services started with their \`deno.json\` task's command.`,
    "",
    "![chart](chart.svg)",
    "",
    "## Checks",
    "",
    checksSection(checkResults(results)),
    "",
    "## Targets",
    "",
    "Ratios to same-run floors and to the course's code; a busy machine may miss them, so they are reported, not enforced.",
    "",
    targetsSection(verdicts),
  ];
  if (results.skipped.length > 0) {
    parts.push("", `Skipped: ${results.skipped.join("; ")}.`);
  }
  if (results.ingest) {
    parts.push("", "## 1. Ingest: POST /users on one API process", "", ingestSection(results));
  }
  if (results.traefik) {
    parts.push(
      "",
      "## 1b. Ingest through Traefik: its ceiling, our API, the course's producer",
      "",
      traefikSection(results),
    );
  }
  if (results.drain) {
    parts.push("", "## 2. Drain: queued users into the table", "", drainSection(results));
  }
  const courseCost = courseCostSection(results);
  if (courseCost !== undefined) {
    parts.push("", "## Against the course: CPU per user, process by process", "", courseCost);
  }
  if (results.endToEnd) {
    parts.push("", "## 3. End to end through Traefik", "", endToEndSection(results));
  }
  const courseEndToEnd = courseEndToEndSection(results);
  if (courseEndToEnd !== undefined) {
    parts.push("", "### The course's design end to end", "", courseEndToEnd);
  }
  if (results.growth) parts.push("", "## 4. Growth", "", growthSection(results));
  if (results.bulk) {
    parts.push("", "## 5. Bulk: many users per request", "", bulkSection(results));
  }
  const capacity = capacitySection(results);
  if (capacity !== undefined) {
    parts.push(
      "",
      "## Capacity model",
      "",
      "![capacity](capacity.svg)",
      "",
      capacity,
    );
  }
  const profiles = [
    results.ingest?.profile &&
    profileTables(
      `API, queue mode, under load (${results.ingest.plan.profileSeconds} s)`,
      results.ingest.profile,
    ),
    results.drain?.profile &&
    profileTables(
      `Consumer, batch 1000, draining ${formatCount(results.drain.plan.profileUsers)} users`,
      results.drain.profile,
    ),
    results.bulk?.profile &&
    profileTables(
      `API, POST /users/batch with ${PROFILED_BATCH} users per request, directly under oha (${results.bulk.plan.profileSeconds} s)`,
      results.bulk.profile,
    ),
    results.drain?.singleProfile &&
    profileTables(
      `Consumer, single mode, draining ${formatCount(results.drain.plan.singleUsers)} users`,
      results.drain.singleProfile,
    ),
  ].filter((p): p is string => typeof p === "string");
  if (profiles.length > 0) {
    parts.push(
      "",
      "## Profiles",
      "",
      "`deno run --cpu-prof` on a separate run (profiling slows a process, so these runs are not the measurements above). Self time by origin (npm package, Deno extension, our module, V8's garbage collector; `(native)` is time in Rust ops such as socket writes) and by function.",
      "",
      profiles.join("\n\n"),
    );
  }
  return parts.join("\n") + "\n";
}
