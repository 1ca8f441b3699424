/**
 * Writing one run's results as Markdown: the targets first, then a table per
 * phase with every figure next to its same-run reference, the profiles' top
 * frames, and how the figures were taken.
 *
 * @module
 */

import { type Check, checkResults } from "./checks.ts";
import type { ProfileSummary } from "./cpu_profile.ts";
import { drainLabel, type DrainRun } from "./drain.ts";
import { rssWhenDone } from "./growth.ts";
import {
  cpuMicrosPerRequest,
  INGEST_TARGETS,
  type IngestResult,
  type IngestRun,
  type IngestTarget,
  median,
  medianRun,
  pairedRatio,
  shareOfReference,
} from "./ingest.ts";
import { formatCount } from "./progress.ts";
import type { BenchResults } from "./results.ts";
import type { TargetVerdict } from "./targets.ts";

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

const pct = (ratio: number) => `${(ratio * 100).toFixed(0)}%`;
const ms = (value: number) => value.toFixed(value < 10 ? 2 : 1);
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

/** The ingest targets a run measured, in round order, with their runs. */
function measuredTargets(
  ingest: IngestResult,
): { target: IngestTarget; runs: readonly IngestRun[] }[] {
  return INGEST_TARGETS.flatMap((target) => {
    const runs = ingest.runs[target];
    return runs === undefined || runs.length === 0 ? [] : [{ target, runs }];
  });
}

/** A target's name in the tables. */
export function ingestLabel(target: IngestTarget, ingest: IngestResult): string {
  switch (target) {
    case "reference":
      return "reference (same app, `accept` does nothing)";
    case "queue":
      return "**API, queue mode**";
    case "baseline":
      return `previous build \`${
        ingest.baseline?.commit.slice(0, 7) ?? "?"
      }\` (its own API, queue mode)`;
    case "course":
      return "the course's producer (`course_producer.ts`: LPUSH, nothing else)";
    case "direct":
      return "API, direct mode (the course's first version: an INSERT per request)";
  }
}

/**
 * Issue #10's and #9's comparisons: queue mode against the course's producer
 * and the previous build, by req/s in the same rounds and by CPU per request
 * of the API process and of Redis; empty when neither was measured.
 */
function comparisonLines(ingest: IngestResult): string[] {
  const queue = ingest.runs.queue;
  const compared = (["course", "baseline"] as const).flatMap((target) => {
    const runs = ingest.runs[target];
    return runs === undefined || runs.length === 0 ? [] : [{ target, runs }];
  });
  if (compared.length === 0) return [];
  const micros = (runs: readonly IngestRun[], process: "serverCores" | "redisCores") =>
    cpuMicrosPerRequest(runs, process).toFixed(1);
  const rows = compared.map(({ target, runs }) => [
    target === "course"
      ? "the course's producer"
      : `previous build \`${ingest.baseline?.commit.slice(0, 7) ?? "?"}\``,
    formatCount(median(runs.map((r) => r.requestsPerSecond))),
    `${pairedRatio(queue, runs).toFixed(2)}×`,
    `${micros(queue, "serverCores")} vs ${micros(runs, "serverCores")}`,
    `${micros(queue, "redisCores")} vs ${micros(runs, "redisCores")}`,
  ]);
  const lines = [
    "",
    `**Against the course's producer and the previous build.** Queue mode (${
      formatCount(median(queue.map((r) => r.requestsPerSecond)))
    } req/s) divided by each, round by round (the median of the per-round ratios: above 1× is faster); CPU per request is the median over the rounds of CPU time over requests answered, for the API process and for Redis (which only the measured server uses during its run).`,
    "",
    markdownTable(
      [
        "Compared with",
        "its req/s",
        "queue / it",
        "API CPU µs/request (queue vs it)",
        "Redis CPU µs/request (queue vs it)",
      ],
      rows,
      ["left", "right", "right", "right", "right"],
    ),
  ];
  if (ingest.runs.course !== undefined) {
    lines.push(
      "",
      "The course's producer is its chapter's `POST /users` as written: the name from the JSON body, LPUSHed as `{ name }` onto one list with ioredis' defaults, 202 \"Accepted\" — no content-type check, body limit, validation, id, envelope, queue bound or deadline, which the queue mode pays for. It runs directly here; issue #10 also wants it behind Traefik in the end-to-end phase, which this benchmark does not do yet.",
    );
  }
  if (ingest.baseline !== undefined) {
    const { ref, commit, subject } = ingest.baseline;
    lines.push(
      "",
      `The previous build is \`${ref}\` = \`${
        commit.slice(0, 10)
      }\` ("${subject}"): its tree from \`git archive\`, its own \`deno task server\` command and packages, on the same Redis with its own list.`,
    );
  }
  return lines;
}

function ingestSection(results: BenchResults): string {
  const ingest = results.ingest!;
  const { plan } = ingest;
  const reference = median(ingest.runs.reference.map((r) => r.requestsPerSecond));
  const targets = measuredTargets(ingest);
  const rows = targets.map(({ target, runs }) => {
    const run = medianRun(runs);
    const errors = runs.reduce((sum, r) => sum + r.non2xx + r.socketErrors, 0);
    return [
      ingestLabel(target, ingest),
      formatCount(median(runs.map((r) => r.requestsPerSecond))),
      pct(shareOfReference(ingest, target)),
      ms(run.latencyMs.p50),
      ms(run.latencyMs.p99),
      errors,
      cpuMicrosPerRequest(runs, "serverCores").toFixed(1),
      cpuMicrosPerRequest(runs, "redisCores").toFixed(1),
      cores(run.serverCores),
      cores(run.redisCores),
      cores(run.postgresCores),
    ];
  });
  const others = targets.filter(({ target }) => target !== "reference");
  const rounds = ingest.runs.reference.map((ref, i) => [
    i + 1,
    formatCount(ref.requestsPerSecond),
    ...others.flatMap(({ runs }) => [
      formatCount(runs[i]?.requestsPerSecond ?? 0),
      pct((runs[i]?.requestsPerSecond ?? 0) / ref.requestsPerSecond),
    ]),
  ]);
  const cpuPerRequest = (target: "reference" | "queue") =>
    median(ingest.runs[target].map((r) => r.serverCores / r.requestsPerSecond * 1e6));
  const cpuRatio = cpuPerRequest("reference") / cpuPerRequest("queue");
  const counted = (r: { requests: number; non2xx: number }) => r.requests - r.non2xx;
  const kept = ingest.runs.queue.map((r) => `${r.kept}/${counted(r)}`).join(", ");
  const lost = ingest.runs.queue.filter((r) => r.kept < counted(r)).length;
  const extra = ingest.runs.queue.filter((r) => r.kept > counted(r)).length;
  const lines = [
    `One API process on a free loopback port; wrk, ${plan.connections} connections, 1 thread, ${plan.seconds} s per run after ${plan.warmupSeconds} s of unmeasured warm-up; the ${targets.length} servers take turns, ${plan.rounds} round(s). Figures are medians over the rounds; the ratio is the median of the per-round ratios (each round's runs are seconds apart, so drift cancels).`,
    "",
    markdownTable(
      [
        "Server",
        "req/s",
        "of reference",
        "p50 ms",
        "p99 ms",
        "errors (non-2xx, socket)",
        "server CPU µs/request",
        "redis CPU µs/request",
        "server cores",
        "redis cores",
        "postgres cores",
      ],
      rows,
      ["left", ...Array<Align>(10).fill("right")],
    ),
    "",
    markdownTable(
      [
        "Round",
        "reference req/s",
        ...others.flatMap(({ target }) => [`${target} req/s`, `${target}/ref`]),
      ],
      rounds,
      Array(2 + 2 * others.length).fill("right"),
    ),
    "",
    `By CPU per request, the steadier figure, queue mode costs the API ${
      cpuPerRequest("queue").toFixed(1)
    } µs per request against the reference's ${
      cpuPerRequest("reference").toFixed(1)
    } µs: a CPU-bound API answers ${
      pct(cpuRatio)
    } of the reference's requests per core-second (Redis's own CPU, on the other core, not counted).`,
    "",
    `${
      lost === 0
        ? "Every 202 was kept"
        : `**${lost} of ${ingest.runs.queue.length} queue-mode runs kept fewer users than were answered 2xx**`
    }: users queued after each queue-mode run / 2xx wrk counted = ${kept}${
      extra > 0
        ? " (more than counted: wrk stops counting with requests in flight, which the server still answers)"
        : ""
    }.`,
    "",
    `Reference: ${
      formatCount(reference)
    } req/s is what \`Deno.serve\` + Hono sustain for this exact request on this machine while wrk shares it; "cores" is CPU time during the run divided by its length (1.00 = one core busy), and "server CPU µs/request" is the server's CPU time divided by the requests it answered: the steadiest figure on a shared machine, since it does not depend on how much CPU the scheduler gave the server.`,
    ...comparisonLines(ingest),
  ];
  if (ingest.k6Check) {
    const { k6, wrk } = ingest.k6Check;
    lines.push(
      "",
      `**Load generator: wrk.** Against the same reference server, k6 (closed model, ${plan.connections} VUs) reached ${
        formatCount(k6)
      } req/s where wrk reached ${formatCount(wrk)} req/s (${(wrk / k6).toFixed(1)}× k6's rate): ${
        wrk > k6
          ? "k6's JavaScript VUs need more CPU per request, so at these rates k6 would measure itself"
          : "here k6 kept up with wrk"
      }. k6 is used where an open model matters (end to end, overload), at rates it can drive.`,
    );
  } else {
    lines.push(
      "",
      "**Load generator: wrk.** The comparison with k6 on the reference runs only in the full benchmark; this run did not measure it.",
    );
  }
  return lines.join("\n");
}

function drainSection(results: BenchResults): string {
  const drain = results.drain!;
  const reference = drain.referenceRowsPerSecond;
  const single = drain.single.rowsPerSecond;
  const row = (run: DrainRun) => [
    drainLabel(run),
    formatCount(run.users),
    run.seconds.toFixed(2),
    formatCount(run.rowsPerSecond),
    pct(run.rowsPerSecond / reference),
    run.mode === "single" ? "1×" : `${(run.rowsPerSecond / single).toFixed(0)}×`,
    cores(run.consumerCores),
    cores(run.postgresCores),
    cores(run.redisCores),
    run.peakRssMiB.toFixed(0),
  ];
  const references = drain.references.map((r, i) => [
    i === 0 ? "reference (before)" : "reference (after)",
    formatCount(r.users),
    r.seconds.toFixed(2),
    formatCount(r.rowsPerSecond),
    pct(r.rowsPerSecond / reference),
    "",
    "",
    "",
    "",
    "",
  ]);
  return [
    `Each drain: the table truncated, the consumers started (\`deno.json\`'s consumer task with \`CONSUMER_MODE\`/\`BATCH_SIZE\`) and warmed up on a few thousand users (connected, statement prepared, code compiled), the table checkpointed, then ${
      formatCount(drain.plan.users)
    } users pushed to a staging list (RedisQueue.enqueue, 1000 per push) and RENAMEd onto the queue in one step. Timed from the first batch taken until the queue and every processing list are empty (the last batch committed and acknowledged); then the table is checked to hold every user. Single mode drains a smaller backlog of ${
      formatCount(drain.plan.singleUsers)
    } users (one row per round trip); rows/s is comparable. The reference inserts the same number of rows from memory with \`insertUsers\` (schema/users_table.ts), ${
      drain.references[0]?.batch ?? 1000
    } rows per statement, one statement at a time on one warmed-up connection, before and after the consumers' runs; their mean is the 100%. Cores are CPU time during the drain over its length, for the consumers, all of PostgreSQL's processes and Redis.`,
    "",
    markdownTable(
      [
        "Setup",
        "users",
        "seconds",
        "rows/s",
        "of reference",
        "of single",
        "consumer cores",
        "postgres cores",
        "redis cores",
        "peak RSS MiB",
      ],
      [...references, row(drain.single), ...drain.batch.map(row)],
      ["left", "right", "right", "right", "right", "right", "right", "right", "right", "right"],
    ),
  ].join("\n");
}

function endToEndSection(results: BenchResults): string {
  const e2e = results.endToEnd!;
  const top = e2e.runs.find((r) => r.offered === e2e.maxSustained);
  const rows = e2e.runs.map((r) => [
    formatCount(r.offered),
    formatCount(r.acceptedPerSecond),
    formatCount(r.storedPerSecond),
    pct(r.storedPerSecond / Math.max(r.acceptedPerSecond, 1e-9)),
    formatCount(r.maxBacklog),
    ms(r.latencyMs.p50),
    ms(r.latencyMs.p99),
    ms(r.latencyMs.max),
    r.k6.dropped,
    r.k6.rejected + r.k6.failed,
    r.stored === r.k6.accepted ? "all" : `${r.stored}/${r.k6.accepted}`,
    r.sustained ? "yes" : "no",
  ]);
  const cpuRows = e2e.runs.map((r) => [
    formatCount(r.offered),
    ...(["k6", "traefik", "api", "consumers", "redis", "postgres", "machine"] as const).map((
      part,
    ) => cores(r.cores[part])),
  ]);
  return [
    `The native stack (\`tools/stack/\`: Traefik → ${e2e.plan.servers} API replicas → Redis → ${e2e.plan.consumers} consumers → PostgreSQL, project.env's settings) on free loopback ports. k6 \`constant-arrival-rate\` (open model: requests arrive on schedule whatever the latency) for ${e2e.plan.seconds} s per rate, doubling from ${e2e.plan.startRate} req/s until a rate is not sustained, then one midpoint, then half the highest sustained rate. Between rates the backlog drains and the table is truncated. Stored/s counts the rows stored by the time of the last enqueue, over the first-to-last-enqueue window; latency is \`stored_at - enqueued_at\` of every row, in SQL. Sustained = ≥ 99% of the requests k6 sent answered 202 and stored/s ≥ 98% of accepted/s, with k6 having sent ≥ 95% of what was asked (k6 "drops" iterations it cannot start on time, which on a busy two-core machine happens before the stack is the limit; the \`machine\` column below shows how busy the machine was, other tenants included).`,
    "",
    `Highest sustained rate: **${formatCount(e2e.maxSustained)} req/s** offered${
      top ? ` (${formatCount(top.acceptedPerSecond)} accepted/s)` : ""
    }.`,
    "",
    markdownTable(
      [
        "offered req/s",
        "accepted/s",
        "stored/s",
        "stored/accepted",
        "max backlog",
        "p50 ms",
        "p99 ms",
        "max ms",
        "k6 dropped",
        "non-202",
        "202s stored",
        "sustained",
      ],
      rows,
      Array(10).fill("right"),
    ),
    "",
    "CPU during each run, in cores (2.00 = the whole machine; `machine` includes everything else running on it):",
    "",
    markdownTable(
      [
        "offered req/s",
        "k6",
        "traefik",
        "API replicas",
        "consumers",
        "redis",
        "postgres",
        "machine",
      ],
      cpuRows,
      Array(8).fill("right"),
    ),
  ].join("\n");
}

function growthSection(results: BenchResults): string {
  const { small, large, overload, plan } = results.growth!;
  const secondHalf = (run: DrainRun) => {
    const end = run.rssSamples.at(-1)?.ms ?? 0;
    const mib = run.rssSamples.filter((s) => s.ms >= end / 2).map((s) => s.mib);
    return mib.length ? `${Math.min(...mib).toFixed(0)}–${Math.max(...mib).toFixed(0)}` : "";
  };
  const { k6 } = overload;
  return [
    `One consumer (batch mode, BATCH_SIZE 1000) drains each backlog in a fresh process, warmed up first as in the drain phase; RSS is the Deno process's VmRSS, sampled every 250 ms. To compare like with like, the larger drain's RSS is also read at the moment it had stored as many rows as the smaller drain in all (V8 grows its heap with the work done, whatever the backlog); the backlog itself stays in Redis.`,
    "",
    markdownTable(
      [
        "Backlog",
        "rows/s",
        "rows/s vs smaller",
        `RSS after ${formatCount(small.users)} rows MiB`,
        "peak RSS MiB",
        "RSS over 2nd half MiB",
      ],
      [small, large].map((run) => [
        formatCount(run.users),
        formatCount(run.rowsPerSecond),
        pct(run.rowsPerSecond / small.rowsPerSecond),
        rssWhenDone(run.rssSamples, small.users).toFixed(0),
        run.peakRssMiB.toFixed(0),
        secondHalf(run),
      ]),
      ["right", "right", "right", "right", "right", "right"],
    ),
    "",
    `API under 2× overload: one API (queue mode, QUEUE_MAX_LENGTH=${plan.overloadMaxLength}) and one single-mode consumer, which drained ${
      formatCount(overload.drainRate)
    } users/s just before; k6 offered twice that, ${
      formatCount(overload.offeredRate)
    } req/s (open model, at most 200 requests in flight), for ${plan.overloadSeconds} s. RSS sampled every 500 ms.`,
    "",
    markdownTable(
      [
        "offered/s",
        "accepted/s",
        "503/s",
        "failed",
        "stored/accepted",
        "k6 dropped",
        "p99 ms",
        "max backlog",
        "RSS 2nd quarter MiB",
        "RSS last quarter MiB",
        "peak MiB",
      ],
      [[
        formatCount(overload.offeredRate),
        formatCount(k6.accepted / k6.seconds),
        formatCount(k6.rejected / k6.seconds),
        k6.failed,
        overload.stored === undefined ? "not counted" : `${overload.stored}/${k6.accepted}`,
        k6.dropped,
        ms(k6.latencyMs.p99),
        `${formatCount(overload.maxBacklog)} / ${formatCount(overload.maxLength)}`,
        overload.earlyRssMiB.toFixed(0),
        overload.lateRssMiB.toFixed(0),
        overload.peakRssMiB.toFixed(0),
      ]],
      Array(11).fill("right"),
    ),
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
    `# Benchmark: the pipeline against same-run references (${run.variant} run)`,
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
    `Absolute figures drift on a shared ${run.cores}-core machine, so every figure is paired with a reference measured in the same run, and the ratio is the headline. Every process is real: Redis and PostgreSQL as the native stack runs them, our services started with their \`deno.json\` task's command.`,
    "",
    "![chart](chart.svg)",
    "",
    "## Checks",
    "",
    checksSection(checkResults(results)),
    "",
    "## Targets",
    "",
    "Ratios to same-run references; a busy machine may miss them, so they are reported, not enforced.",
    "",
    targetsSection(verdicts),
  ];
  if (results.skipped.length > 0) {
    parts.push("", `Skipped: ${results.skipped.join("; ")}.`);
  }
  if (results.ingest) {
    parts.push("", "## 1. Ingest: POST /users on one API process", "", ingestSection(results));
  }
  if (results.drain) {
    parts.push("", "## 2. Drain: queued users into the table", "", drainSection(results));
  }
  if (results.endToEnd) {
    parts.push("", "## 3. End to end through Traefik", "", endToEndSection(results));
  }
  if (results.growth) parts.push("", "## 4. Growth", "", growthSection(results));
  const profiles = [
    results.ingest?.profile &&
    profileTables(
      `API, queue mode, under wrk (${results.ingest.plan.profileSeconds} s)`,
      results.ingest.profile,
    ),
    results.drain?.profile &&
    profileTables(
      `Consumer, batch 1000, draining ${formatCount(results.drain.plan.profileUsers)} users`,
      results.drain.profile,
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
