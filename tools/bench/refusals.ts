/**
 * Why each 503 of an end-to-end run came, from the records of the parties
 * that gave it, so that a 503 nobody accounts for fails the run instead of
 * hiding among the ones an overload explains:
 *
 * - Traefik's own 503 (no API replica ready: every replica failed its health
 *   check) carries Traefik's plain-text body, {@linkcode TRAEFIK_OWN_BODY};
 *   oha records each answer's status and body length (`--db-url`), and that
 *   length is Traefik's and no JSON error body's;
 * - every other 503 must be one the API replicas counted by the answer's
 *   code (`users_pipeline_enqueue_rejections_total` by reason: `full` for
 *   `queue_full`, `unavailable` for `queue_unavailable`, `unconfirmed`),
 *   read from each replica's `/metrics` before and after the run.
 *
 * What neither record accounts for is unexplained.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";

/**
 * The body of Traefik's own 503 when no server of a service is available
 * (Go's `http.Error` adds the newline): plain text, where every error answer
 * of the API is JSON with at least its message and its code.
 */
export const TRAEFIK_OWN_BODY = "no available server\n";

/** The API's reasons for a 503 to `POST /users`, as its metrics label them. */
export const API_REFUSALS = ["full", "unavailable", "unconfirmed"] as const;

/** One of {@linkcode API_REFUSALS}. */
export type ApiRefusal = typeof API_REFUSALS[number];

/** A run's 503s by cause. */
export interface Refusals {
  /** 503s oha counted. */
  readonly total: number;
  /** Traefik's own (no replica ready), by body. */
  readonly traefik: number;
  /** The API's, by the code it answered. */
  readonly api: Readonly<Record<ApiRefusal, number>>;
  /** 503s no record accounts for (or records of 503s oha did not see). */
  readonly unexplained: number;
}

/** The API's 503 counts by reason. */
export type ApiRefusalCounts = Readonly<Record<ApiRefusal, number>>;

const REJECTIONS_METRIC = "users_pipeline_enqueue_rejections_total";

/**
 * The API's refusals by reason in a replica's `/metrics` text.
 *
 * @throws {TypeError} when a reason's counter is missing: the API no longer counts it, and its
 * 503s could not be explained.
 */
export function parseApiRefusals(metrics: string): ApiRefusalCounts {
  const counts = {} as Record<ApiRefusal, number>;
  for (const reason of API_REFUSALS) {
    const line = new RegExp(
      `^${REJECTIONS_METRIC}\\{(?:[^}]*,)?reason="${reason}"(?:,[^}]*)?\\} (\\S+)$`,
      "m",
    ).exec(metrics);
    const value = Number(line?.[1]);
    if (line === null || !Number.isFinite(value)) {
      throw new TypeError(
        `Cannot explain the API's 503s as its metrics lack ${REJECTIONS_METRIC}{reason="${reason}"}: current value is ${
          JSON.stringify(metrics.slice(0, 200))
        }`,
      );
    }
    counts[reason] = value;
  }
  return counts;
}

/** The API replicas' refusals by reason, summed over `urls` (`http://127.0.0.1:<port>`). */
export async function readApiRefusals(urls: readonly string[]): Promise<ApiRefusalCounts> {
  const each = await Promise.all(urls.map(async (url) => {
    const response = await fetch(`${url}/metrics`);
    return parseApiRefusals(await response.text());
  }));
  return Object.fromEntries(
    API_REFUSALS.map((reason) => [reason, each.reduce((sum, c) => sum + c[reason], 0)]),
  ) as Record<ApiRefusal, number>;
}

/** The number of 503s in oha's record (`--db-url`) by body length in bytes. */
export function read503BodyLengths(dbPath: string): Map<number, number> {
  const db = new DatabaseSync(dbPath, { readOnly: true });
  try {
    const rows = db.prepare(
      "select len_bytes as bytes, count(*) as n from oha where status = 503 group by len_bytes",
    ).all() as { bytes: number; n: number }[];
    return new Map(rows.map((r) => [Number(r.bytes), Number(r.n)]));
  } finally {
    db.close();
  }
}

/**
 * A run's 503s by cause: `total` as oha counted them, the body lengths of
 * its record, and the API's counts before and after the run.
 */
export function explainRefusals(
  total: number,
  bodyLengths: ReadonlyMap<number, number>,
  api: { readonly before: ApiRefusalCounts; readonly after: ApiRefusalCounts },
): Refusals {
  const traefik = bodyLengths.get(new TextEncoder().encode(TRAEFIK_OWN_BODY).length) ?? 0;
  const byApi = Object.fromEntries(
    API_REFUSALS.map((reason) => [reason, api.after[reason] - api.before[reason]]),
  ) as Record<ApiRefusal, number>;
  const apiTotal = API_REFUSALS.reduce((sum, reason) => sum + byApi[reason], 0);
  // Either way a count that does not match is a 503 no record accounts for.
  return { total, traefik, api: byApi, unexplained: Math.abs(total - traefik - apiTotal) };
}

/** `3 Traefik's own, 5 queue_full, 0 queue_unavailable, 0 unconfirmed, 0 unexplained` */
export function describeRefusals(refusals: Refusals): string {
  const { api } = refusals;
  return `${refusals.traefik} Traefik's own (no replica ready), ${api.full} queue_full, ${api.unavailable} queue_unavailable, ${api.unconfirmed} unconfirmed, ${refusals.unexplained} unexplained`;
}
