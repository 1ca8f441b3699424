/**
 * The few calls the tests make to a running Prometheus's HTTP API (native,
 * compose or Swarm alike): which targets it scrapes and how they are, an
 * instant query, and a wait until every replica of each job is scraped.
 *
 * @module
 */

import { waitFor } from "@users-pipeline/harness/wait";

/**
 * The metrics of the pipeline the tests pin by name: the users the consumers
 * stored (a counter per consumer, `server-consumer/metrics.ts`), the age of
 * the oldest user waiting in the queue (a gauge by `state`: `queued`,
 * `retry`) and the queue's depth.
 */
export const STORED_USERS = "users_pipeline_users_stored_total";
/** See {@linkcode STORED_USERS}. */
export const OLDEST_QUEUED_AGE = "users_pipeline_queue_oldest_age_seconds";
/** The queue's depth by `state` (`queued`, `retry`, `processing`, `dead`), a gauge. */
export const QUEUE_DEPTH = "users_pipeline_queue_depth";

/** One active target, as `GET /api/v1/targets` reports it. */
export interface Target {
  /** The scrape config's `job_name` (`server`, `server-consumer`). */
  readonly job: string;
  /** `host:port` scraped. */
  readonly instance: string;
  /** `up` once its last scrape succeeded. */
  readonly health: "up" | "down" | "unknown";
  /** Why the last scrape failed; "" when it did not. */
  readonly lastError: string;
}

/** One series of an instant query's vector. */
export interface Sample {
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** The longest one API call may take: a Prometheus that is up answers in milliseconds. */
const REQUEST_TIMEOUT_MS = 2_000;

async function apiData(url: string): Promise<unknown> {
  const response = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  const body = await response.json();
  if (!response.ok || body.status !== "success") {
    throw new Error(`Prometheus answered ${response.status} to ${url}: ${JSON.stringify(body)}`);
  }
  return body.data;
}

/** The active targets of `data` (the `data` of `/api/v1/targets`). */
export function parseTargets(data: unknown): Target[] {
  const active = (data as { activeTargets?: unknown[] }).activeTargets ?? [];
  return active.map((target) => {
    const t = target as {
      labels: Record<string, string>;
      scrapePool: string;
      health: Target["health"];
      lastError?: string;
    };
    return {
      job: t.labels.job ?? t.scrapePool,
      instance: t.labels.instance ?? "",
      health: t.health,
      lastError: t.lastError ?? "",
    };
  });
}

/** The samples of `data` (the `data` of `/api/v1/query`), which must be a vector. */
export function parseVector(data: unknown): Sample[] {
  const { resultType, result } = data as { resultType: string; result: unknown[] };
  if (resultType !== "vector") {
    throw new TypeError(`Cannot read a query result as a vector: current value is ${resultType}`);
  }
  return result.map((sample) => {
    const { metric, value } = sample as { metric: Record<string, string>; value: [number, string] };
    return { labels: metric, value: Number(value[1]) };
  });
}

/** `{ up, down }` counts of targets per job, e.g. `{ server: { up: 2, down: 0 } }`. */
export function targetHealth(
  targets: readonly Target[],
): Record<string, { up: number; down: number }> {
  const health: Record<string, { up: number; down: number }> = {};
  for (const { job, health: h } of targets) {
    health[job] ??= { up: 0, down: 0 };
    if (h === "up") health[job].up++;
    else health[job].down++;
  }
  return health;
}

/** Every active target of the Prometheus at `baseUrl`. */
export async function activeTargets(baseUrl: string): Promise<Target[]> {
  return parseTargets(await apiData(`${baseUrl}/api/v1/targets?state=active`));
}

/** An instant query; `promql` must give a vector. */
export async function query(baseUrl: string, promql: string): Promise<Sample[]> {
  return parseVector(
    await apiData(`${baseUrl}/api/v1/query?query=${encodeURIComponent(promql)}`),
  );
}

/**
 * Waits until the Prometheus at `baseUrl` scrapes exactly `want[job]`
 * targets of each job, all up, and returns how long that took. A Prometheus
 * that does not answer yet counts as not there yet.
 */
export async function waitForTargets(
  baseUrl: string,
  want: Readonly<Record<string, number>>,
  { timeoutMs = 30_000 }: { timeoutMs?: number } = {},
): Promise<number> {
  let seen = "no answer";
  return await waitFor(
    () => `Prometheus to scrape ${JSON.stringify(want)}, all up (last: ${seen})`,
    async () => {
      let targets: Target[];
      try {
        targets = await activeTargets(baseUrl);
      } catch (error) {
        seen = String(error);
        return false;
      }
      seen = JSON.stringify(targets);
      const health = targetHealth(targets);
      return Object.entries(want).every(([job, n]) =>
        (health[job]?.up ?? 0) === n && (health[job]?.down ?? 0) === 0
      );
    },
    { timeoutMs, intervalMs: 500 },
  );
}

/**
 * Waits until `promql` gives a vector for which `check` holds and returns
 * it; the last samples seen are in the timeout's message.
 */
export async function waitForQuery(
  baseUrl: string,
  promql: string,
  check: (samples: Sample[]) => boolean,
  { timeoutMs = 30_000 }: { timeoutMs?: number } = {},
): Promise<Sample[]> {
  let samples: Sample[] = [];
  let seen = "no answer";
  await waitFor(() => `${promql} to hold (last: ${seen})`, async () => {
    try {
      samples = await query(baseUrl, promql);
    } catch (error) {
      seen = String(error);
      return false;
    }
    seen = JSON.stringify(samples);
    return check(samples);
  }, { timeoutMs, intervalMs: 500 });
  return samples;
}

/**
 * The consumers' {@linkcode STORED_USERS} summed over every replica, once
 * every replica's counter was scraped at or after `after` (ms since the
 * epoch, default now): a baseline that holds every user stored before that
 * moment, to subtract from a later sum ({@linkcode waitForStored}'s
 * `baseline`). A counter starts at 0 with its process, so a consumer that
 * restarts between the two reads makes the difference meaningless.
 */
export async function storedSum(
  baseUrl: string,
  { after = Date.now(), timeoutMs }: { after?: number; timeoutMs?: number } = {},
): Promise<number> {
  // The sum, only when the oldest of its samples (each series' last scrape) is recent enough.
  const [sum] = await waitForQuery(
    baseUrl,
    `sum(${STORED_USERS}) and on() (min(timestamp(${STORED_USERS})) >= ${after / 1_000})`,
    (samples) => samples.length > 0,
    { timeoutMs },
  );
  return sum!.value;
}

/**
 * Waits until the consumers' {@linkcode STORED_USERS}, summed over every
 * replica, reaches `baseline + count`, and returns the sum minus `baseline`:
 * the users counted since the baseline was read ({@linkcode storedSum}).
 * With no baseline (0), the sum is every user the replicas stored since they
 * started.
 */
export async function waitForStored(
  baseUrl: string,
  count: number,
  { baseline = 0, timeoutMs }: { baseline?: number; timeoutMs?: number } = {},
): Promise<number> {
  const [sum] = await waitForQuery(
    baseUrl,
    `sum(${STORED_USERS})`,
    ([s]) => (s?.value ?? 0) >= baseline + count,
    { timeoutMs },
  );
  return (sum?.value ?? 0) - baseline;
}
