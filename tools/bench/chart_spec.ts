/**
 * The report's chart: a Vega-Lite spec built from one run's results, and its
 * rendering to SVG through Vega's headless View (`renderer: "none"`, then
 * `toSVG()`), so no canvas or browser is needed.
 *
 * Panels: each figure as a share of its same-run floor (with the
 * targets marked), then end to end throughput and latency per offered rate,
 * then memory over time (the growth phase), then the bulk phase's users/s and
 * CPU per user by tier for each number of users per request. A panel without
 * data is left out.
 *
 * @module
 */

import * as vega from "vega";
import { compile, type TopLevelSpec } from "vega-lite";
import { drainLabel, FLOOR_BATCH } from "./drain.ts";
import { pairedRatio, shareOfFloor } from "./ingest.ts";
import type { BenchResults } from "./results.ts";
import { type CapacityModel, scalingRows } from "./capacity.ts";
import {
  BULK_PIPELINE_MICROS_MAX,
  BULK_SPEEDUP_MIN,
  DRAIN_SHARE_MIN,
  INGEST_SHARE_MIN,
  LATENCY_P99_BOUND_MS,
} from "./targets.ts";
import { BULK_PARTS } from "./bulk.ts";

/** One bar of the first panel. */
export interface RatioRow {
  readonly phase: string;
  readonly label: string;
  readonly ratio: number;
  /** The target for this bar, if it has one. */
  readonly target?: number;
}

/** The bars of the first panel: each figure as a share of its floor. */
export function ratioRows(results: BenchResults): RatioRow[] {
  const rows: RatioRow[] = [];
  const ingest = results.ingest;
  if (ingest) {
    const phase = "Ingest";
    rows.push(
      { phase, label: "ingest: our API", ratio: ingest.queueRatio, target: INGEST_SHARE_MIN },
      // The course's producer on the same scale, for comparison; no tick, as its target is on CPU.
      { phase, label: "ingest: course's producer", ratio: shareOfFloor(ingest, "course") },
      {
        phase,
        label: "ingest: our app without Redis (diagnostic)",
        ratio: shareOfFloor(ingest, "no_redis"),
      },
      { phase, label: "ingest: direct mode", ratio: ingest.directRatio },
    );
  }
  const traefik = results.traefik;
  if (traefik) {
    // Their own floor: Traefik's ceiling (the HTTP floor behind the same Traefik).
    rows.push({
      phase: "Traefik",
      label: `Traefik: our API × ${traefik.plan.replicas}`,
      ratio: traefik.ceilingRatio,
    }, {
      phase: "Traefik",
      label: "Traefik: course's producer × 1",
      ratio: pairedRatio(traefik.runs.course, traefik.runs.ceiling),
    });
  }
  if (results.drain) {
    const floor = results.drain.floorRowsPerSecond;
    const { single, course, batch } = results.drain;
    for (const run of [single, course, ...batch]) {
      const isTarget = run.mode === "batch" && run.batchSize === FLOOR_BATCH &&
        run.replicas === 1;
      rows.push({
        phase: "Drain",
        label: `drain: ${drainLabel(run)}`,
        ratio: run.rowsPerSecond / floor,
        ...(isTarget ? { target: DRAIN_SHARE_MIN } : {}),
      });
    }
  }
  return rows;
}

const WIDTH = 520;
const OFFERED = {
  field: "offered",
  type: "quantitative",
  title: "offered req/s",
  axis: { format: ",d" },
};
const LABEL = {
  field: "label",
  type: "nominal",
  sort: null,
  title: null,
  // Vega-Lite cuts labels at 180 px; "drain: batch 1000 × 2 consumers" and the like are longer.
  axis: { labelLimit: 260 },
};

/** The chart's Vega-Lite spec. */
export function chartSpec(results: BenchResults): TopLevelSpec {
  const panels: Record<string, unknown>[] = [];
  const ratios = ratioRows(results);
  if (ratios.length > 0) {
    panels.push({
      title:
        "Share of the same-run floor (ingest: the HTTP floor; Traefik rows: Traefik's ceiling; drain: the drain floor; ticks = targets)",
      data: { values: ratios },
      width: WIDTH,
      height: { step: 18 },
      layer: [
        {
          mark: { type: "bar" },
          encoding: {
            y: LABEL,
            x: {
              field: "ratio",
              type: "quantitative",
              axis: { format: "%" },
              title: "share of the floor",
            },
            color: {
              field: "phase",
              type: "nominal",
              title: null,
              scale: {
                domain: ["Ingest", "Traefik", "Drain"],
                range: ["#4c78a8", "#72b7b2", "#f58518"],
              },
            },
          },
        },
        {
          mark: { type: "text", align: "left", dx: 3 },
          encoding: {
            y: LABEL,
            x: { field: "ratio", type: "quantitative" },
            text: { field: "ratio", type: "quantitative", format: ".0%" },
          },
        },
        {
          mark: { type: "tick", color: "#222", thickness: 3 },
          encoding: { y: LABEL, x: { field: "target", type: "quantitative" } },
        },
        {
          data: { values: [{ one: 1 }] },
          mark: { type: "rule", strokeDash: [4, 3], color: "#555" },
          encoding: { x: { field: "one", type: "quantitative" } },
        },
      ],
    });
  }
  const e2e = results.endToEnd;
  if (e2e && e2e.runs.length > 0) {
    const throughput = e2e.runs.flatMap((r) => [
      { offered: r.offered, series: "offered", perSecond: r.offered },
      { offered: r.offered, series: "accepted (202)", perSecond: r.acceptedPerSecond },
      { offered: r.offered, series: "stored", perSecond: r.storedPerSecond },
    ]).concat(
      // The course's design on the same ladder, up to the first rate it did not sustain.
      (e2e.course?.runs ?? []).flatMap((r) => [
        {
          offered: r.offered,
          series: "course's design: accepted",
          perSecond: r.acceptedPerSecond,
        },
        { offered: r.offered, series: "course's design: stored", perSecond: r.storedPerSecond },
      ]),
    );
    panels.push({
      title: `End to end through Traefik: per second, by offered rate (Traefik's ceiling ${
        Math.round(e2e.ceiling)
      }/s; highest sustained ${e2e.maxSustained}/s${
        e2e.course ? `, the course's design ${e2e.course.maxSustained}/s` : ""
      })`,
      data: { values: throughput },
      width: WIDTH,
      height: 180,
      mark: { type: "line", point: true },
      encoding: {
        x: OFFERED,
        y: { field: "perSecond", type: "quantitative", title: "per second" },
        color: { field: "series", type: "nominal", title: null },
        strokeDash: { field: "series", type: "nominal", legend: null },
      },
    });
    const latency = e2e.runs.flatMap((r) => [
      { offered: r.offered, series: "p50", ms: Math.max(r.latencyMs.p50, 0.1) },
      { offered: r.offered, series: "p99", ms: Math.max(r.latencyMs.p99, 0.1) },
    ]);
    panels.push({
      title:
        `Enqueue → stored latency (from the table), by offered rate; rule = ${LATENCY_P99_BOUND_MS} ms`,
      width: WIDTH,
      height: 160,
      layer: [
        {
          data: { values: latency },
          mark: { type: "line", point: true },
          encoding: {
            x: OFFERED,
            y: { field: "ms", type: "quantitative", scale: { type: "log" }, title: "ms (log)" },
            color: { field: "series", type: "nominal", title: null },
          },
        },
        {
          data: { values: [{ bound: LATENCY_P99_BOUND_MS }] },
          mark: { type: "rule", color: "#d62728", strokeDash: [4, 3] },
          encoding: { y: { field: "bound", type: "quantitative" } },
        },
      ],
    });
  }
  const growth = results.growth;
  if (growth) {
    const series = [
      [`consumer, backlog ${growth.small.users.toLocaleString("en-US")}`, growth.small.rssSamples],
      [`consumer, backlog ${growth.large.users.toLocaleString("en-US")}`, growth.large.rssSamples],
      ["API under 2× overload", growth.overload.rssSamples],
    ] as const;
    panels.push({
      title: "Resident memory over time (growth phase)",
      data: {
        values: series.flatMap(([name, samples]) =>
          samples.map((s) => ({ series: name, seconds: s.ms / 1000, mib: s.mib }))
        ),
      },
      width: WIDTH,
      height: 160,
      mark: { type: "line" },
      encoding: {
        x: { field: "seconds", type: "quantitative", title: "seconds since start" },
        y: { field: "mib", type: "quantitative", title: "RSS MiB" },
        color: { field: "series", type: "nominal", title: null },
      },
    });
  }
  const bulk = results.bulk;
  if (bulk && bulk.batches.length > 0) {
    const runs = [bulk.single, ...bulk.batches];
    const request = (r: (typeof runs)[number]) =>
      r.path === "/users" ? "POST /users" : `batch of ${r.usersPerRequest}`;
    const order = [
      ...runs.map(request),
      ...(bulk.open ? [`open model, ${bulk.open.usersPerRequest} each, sustained`] : []),
    ];
    const REQUEST = { field: "request", type: "nominal", sort: order, title: null };
    panels.push({
      title:
        `Bulk through Traefik, closed loop: users/s by request (rule = ${BULK_SPEEDUP_MIN}× POST /users req/s)`,
      width: WIDTH,
      height: { step: 18 },
      layer: [
        {
          data: {
            values: [
              ...runs.map((r) => ({ request: request(r), usersPerSecond: r.usersPerSecond })),
              // End to end, open model: what the stack sustained, users stored as fast as taken.
              ...(bulk.open
                ? [{
                  request: `open model, ${bulk.open.usersPerRequest} each, sustained`,
                  usersPerSecond: bulk.open.maxSustainedUsers,
                }]
                : []),
            ],
          },
          mark: { type: "bar", color: "#54a24b" },
          encoding: {
            y: REQUEST,
            x: { field: "usersPerSecond", type: "quantitative", title: "users/s" },
          },
        },
        {
          data: { values: [{ rule: BULK_SPEEDUP_MIN * bulk.single.requestsPerSecond }] },
          mark: { type: "rule", strokeDash: [4, 3], color: "#555" },
          encoding: { x: { field: "rule", type: "quantitative" } },
        },
      ],
    });
    panels.push({
      title:
        `Bulk: CPU µs per user stored, by tier (rule = ${BULK_PIPELINE_MICROS_MAX} µs for the pipeline, oha aside; log scale)`,
      width: WIDTH,
      height: 180,
      layer: [
        {
          data: {
            values: runs.flatMap((r) =>
              BULK_PARTS.map((part) => ({
                request: request(r),
                tier: part === "generator" ? "oha" : part,
                micros: Math.max(r.microsPerUser[part], 0.01),
              }))
            ),
          },
          mark: { type: "line", point: true },
          encoding: {
            x: { ...REQUEST, axis: { labelAngle: 0 } },
            y: {
              field: "micros",
              type: "quantitative",
              scale: { type: "log" },
              title: "CPU µs per user (log)",
            },
            color: { field: "tier", type: "nominal", title: null },
          },
        },
        {
          data: { values: [{ bound: BULK_PIPELINE_MICROS_MAX }] },
          mark: { type: "rule", color: "#d62728", strokeDash: [4, 3] },
          encoding: { y: { field: "bound", type: "quantitative" } },
        },
      ],
    });
  }
  // The panels are built as plain objects; compile() checks them when rendering.
  const spec: Record<string, unknown> = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: `users pipeline benchmark (${results.run.variant} run, ${
      results.run.startedAt.slice(0, 16)
    })`,
    vconcat: panels,
    // Each panel has its own series, so its own colours and legend.
    resolve: { scale: { color: "independent" }, legend: { color: "independent" } },
    config: { font: "sans-serif", legend: { orient: "right", labelLimit: 320 } },
    background: "white",
  };
  return spec as unknown as TopLevelSpec;
}

/**
 * The capacity model's chart: users/s by units of each tier (log-log,
 * linear per tier until one PostgreSQL primary is full), with the target
 * rates as rules.
 */
export function capacityChartSpec(model: CapacityModel, title: string): TopLevelSpec {
  const rows = scalingRows(model);
  const spec: Record<string, unknown> = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title,
    width: WIDTH,
    height: 260,
    layer: [
      {
        data: { values: rows },
        mark: { type: "line", point: true },
        encoding: {
          x: {
            field: "units",
            type: "quantitative",
            scale: { type: "log", base: 2 },
            title:
              "units of the tier (cores of Traefik and of the PostgreSQL primary; API replicas; Redis shards; consumers)",
          },
          y: {
            field: "usersPerSecond",
            type: "quantitative",
            scale: { type: "log" },
            title: "users/s at the utilisation ceiling (log)",
          },
          color: { field: "tier", type: "nominal", title: "tier", sort: null },
        },
      },
      {
        data: { values: model.targets.map((t) => ({ rate: t.rate })) },
        mark: { type: "rule", strokeDash: [4, 3], color: "#555" },
        encoding: { y: { field: "rate", type: "quantitative" } },
      },
      {
        data: {
          values: model.targets.map((t) => ({
            rate: t.rate,
            label: `${t.rate.toLocaleString("en-US")}/s`,
          })),
        },
        mark: { type: "text", align: "left", dx: 4, dy: -6, color: "#555" },
        encoding: {
          y: { field: "rate", type: "quantitative" },
          x: { datum: 1 },
          text: { field: "label" },
        },
      },
    ],
    config: { font: "sans-serif" },
    background: "white",
  };
  return spec as unknown as TopLevelSpec;
}

/** Renders a Vega-Lite spec to SVG text, headless. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: "none" });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
