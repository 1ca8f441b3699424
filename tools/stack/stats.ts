/**
 * `./stack stats`: the dashboard's numbers in the terminal, read straight from the running
 * stack's Redis (`queue/overview.ts`, so no admin token is needed) once a second. On a terminal
 * it redraws the screen; otherwise (piped, logged) it prints one line per second. Ctrl-C exits 0.
 * `./stack` runs it in a container on the compose project's network.
 *
 * The rates come from the dashboard's own `rates.js`, so both views always agree on what
 * "ingest" and "stored" mean. While Redis does not answer it says so and keeps trying.
 *
 * Reads env, which `./stack` takes from a running API replica: REDIS_URL, QUEUE_NAME (default
 * `users`), QUEUE_SHARDS and REDIS_CLUSTER_NODES (the numbers then add up over every shard, on
 * every master).
 *
 * @module
 */

import { type Overview, readOverview } from "@users-pipeline/queue";
import { queueClient } from "./queue_client.ts";
import {
  formatAge,
  formatRate,
  type Rates,
  rates,
  snapshotOf,
} from "@users-pipeline/server/dashboard/rates";

/** The dashboard's poll interval: the rates are per-second figures. */
const REFRESH_MS = 1_000;

/** What {@linkcode renderStats} and {@linkcode statsLine} show besides the overview. */
export interface StatsView {
  /** Rates since the previous reading; undefined for the first. */
  readonly rates?: Rates;
  /** When the overview was read. */
  readonly at: Date;
}

const count = (n: number) => n.toLocaleString("en-US");
const rate = (view: StatsView, pick: (rates: Rates) => number) =>
  view.rates === undefined ? "–" : formatRate(pick(view.rates));
const oldest = (overview: Overview) =>
  overview.oldest_queued_age_ms === null ? "–" : formatAge(overview.oldest_queued_age_ms);

/** The whole screen for a terminal: rates, depth by state, consumers and dead letters. */
export function renderStats(overview: Overview, view: StatsView): string {
  const { depth } = overview;
  const lines = [
    `users pipeline  ${view.at.toLocaleTimeString("en-GB")}  (Ctrl-C exits)`,
    "",
    `ingest   ${rate(view, (r) => r.ingest).padStart(9)} /s    stored total  ${
      count(overview.stored_total)
    }`,
    `stored   ${rate(view, (r) => r.stored).padStart(9)} /s    oldest queued ${oldest(overview)}`,
    "",
    `queued ${count(depth.queued)}   retry ${count(depth.retry)}   processing ${
      count(depth.processing)
    }   dead ${count(depth.dead)}`,
    "",
    `consumers (${overview.consumers.length})`,
  ];
  const width = Math.max(12, ...overview.consumers.map((c) => c.id.length + 2));
  for (const consumer of overview.consumers) {
    const perSecond = view.rates?.consumers[consumer.id];
    lines.push(
      `  ${consumer.id.padEnd(width)}${
        (perSecond === undefined ? "–" : formatRate(perSecond)).padStart(9)
      } /s  ${count(consumer.stored).padStart(12)} stored${consumer.alive ? "" : "  (expired)"}`,
    );
  }
  const dead = Object.entries(overview.dead_letters_by_reason).filter(([, n]) => n > 0);
  lines.push("", `dead letters (${count(depth.dead)})`);
  for (const [reason, n] of dead) lines.push(`  ${reason.padEnd(width)}${count(n).padStart(9)}`);
  return lines.join("\n");
}

/** One line per reading, for output that is not a terminal. */
export function statsLine(overview: Overview, view: StatsView): string {
  const { depth } = overview;
  const dead = Object.entries(overview.dead_letters_by_reason)
    .filter(([, n]) => n > 0)
    .map(([reason, n]) => `${reason}:${n}`)
    .join(",");
  return [
    view.at.toISOString(),
    `ingest=${rate(view, (r) => r.ingest)}/s`,
    `stored=${rate(view, (r) => r.stored)}/s`,
    `stored_total=${overview.stored_total}`,
    `queued=${depth.queued}`,
    `retry=${depth.retry}`,
    `processing=${depth.processing}`,
    `dead=${depth.dead}${dead === "" ? "" : ` (${dead})`}`,
    `oldest_queued=${oldest(overview)}`,
    `consumers=${overview.consumers.length}`,
  ].join(" ");
}

/** Clears the screen and puts the cursor top left. */
const CLEAR = "\x1b[H\x1b[2J";

async function main(): Promise<number> {
  const env = Deno.env.toObject();
  const { redis, keys } = queueClient("stats", env, env.REDIS_URL || "redis://127.0.0.1:6379", {
    // Fail each reading fast while Redis is down, and keep reconnecting in the background.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
    commandTimeout: 1_000,
    retryStrategy: () => 500,
    lazyConnect: true,
  });
  const where = env.REDIS_CLUSTER_NODES || env.REDIS_URL || "redis://127.0.0.1:6379";
  redis.on("error", () => {}); // Each failed reading says so below.
  // Without the offline queue a command sent before the connection is up fails: connect first
  // (a stack that is down fails the first reading, which says so, and ioredis keeps trying).
  await redis.connect().catch(() => {});
  const tty = Deno.stdout.isTerminal();
  const encoder = new TextEncoder();
  const write = (text: string) => Deno.stdout.writeSync(encoder.encode(text));

  let stopped = false;
  let wake = () => {};
  Deno.addSignalListener("SIGINT", () => {
    stopped = true;
    wake();
  });

  let previous: ReturnType<typeof snapshotOf> | undefined;
  while (!stopped) {
    const at = new Date();
    try {
      const overview = await readOverview(redis, { keys, now: at.getTime() });
      const current = snapshotOf(overview, at.getTime());
      const view = { at, rates: previous && rates(previous, current) };
      previous = current;
      write(tty ? `${CLEAR}${renderStats(overview, view)}\n` : `${statsLine(overview, view)}\n`);
    } catch (error) {
      previous = undefined;
      const text = `${at.toISOString()} Redis at ${where} ` +
        `does not answer (${error instanceof Error ? error.message : error}); retrying`;
      write(tty ? `${CLEAR}${text}\n` : `${text}\n`);
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, REFRESH_MS);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
  redis.disconnect();
  return 0;
}

if (import.meta.main) Deno.exit(await main());
