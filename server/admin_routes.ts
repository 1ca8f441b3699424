/**
 * The operator's routes, mounted under `/admin` by `createApp` only when
 * ADMIN_TOKEN is set (otherwise they do not exist: 404):
 *
 * - `GET /admin/overview`: the queue at a glance (`queue/overview.ts`);
 * - `GET /admin/dead-letters?offset=&limit=`: dead letters, newest first, with
 *   the counts by kind;
 * - `POST /admin/dead-letters/requeue` and `POST /admin/dead-letters/purge`
 *   with a JSON body `{}` (every letter), `{"reason": kind}` and/or
 *   `{"ids": [user id…]}` and/or `{"records": [record…]}` (`queue/dead_letters.ts`).
 *
 * One letter, or a selection, is named by its user's id, never by its place
 * in the list: consumers push new letters at the head and other operators
 * take letters out, so a place names another letter a moment later, while an
 * id names the same user's letter wherever it moved, and nothing once it is
 * gone (a stale second click takes nothing). A letter without an id (an item
 * that was never an envelope) is named by its whole record, which the listing
 * gives as `record`. The answer's count says how many of the named were still
 * dead.
 *
 * Every request must carry `Authorization: Bearer <ADMIN_TOKEN>`, else 401
 * `unauthorized` with `WWW-Authenticate` ({@linkcode adminOnly}, which also
 * guards `GET /users`). The token is compared in constant time by the check
 * client keys use (`client_keys.ts`). While Redis
 * fails or does not answer, they answer 503 `queue_unavailable`, as
 * `POST /users` does.
 *
 * @module
 */

import { Hono, type MiddlewareHandler } from "@hono/hono";
import { z } from "zod";
import {
  DEAD_LETTER_KINDS,
  type DeadLetterFilter,
  type DeadLetterPage,
  isUuid,
  MAX_PAGE,
  type Overview,
} from "@users-pipeline/queue";
import { ApiError } from "./api_error.ts";
import { bearerCheck } from "./client_keys.ts";

/** The dead-letter operations the routes use; `DeadLetters` provides them. */
export interface DeadLetterAdmin {
  list(offset: number, limit: number): Promise<DeadLetterPage>;
  requeue(filter: DeadLetterFilter): Promise<number>;
  purge(filter: DeadLetterFilter): Promise<number>;
}

/** What the admin routes need; `main.ts` wires them when ADMIN_TOKEN is set. */
export interface AdminOptions {
  /** The bearer token every request must carry (ADMIN_TOKEN). */
  readonly token: string;
  readonly deadLetters: DeadLetterAdmin;
  readonly overview: () => Promise<Overview>;
}

/** Most ids one request may name: the script receives them as arguments. */
const MAX_IDS = 10_000;
/** Most letters without an id one request may name by their records. */
const MAX_RECORDS = 1_000;

const filterBody = z.strictObject({
  reason: z.string().refine((kind) => DEAD_LETTER_KINDS.includes(kind), {
    message: `reason must be one of ${DEAD_LETTER_KINDS.join(", ")}`,
  }).optional(),
  ids: z.array(
    z.string().transform((id) => id.toLowerCase()).refine(isUuid, {
      message: "ids must be UUIDs",
    }),
  ).min(1, "ids must not be empty").max(MAX_IDS, `ids must hold at most ${MAX_IDS}`)
    .optional(),
  // A letter without a user id is named by its whole record, as the listing gives it: each
  // one is sent to every shard's script, hence the smaller bound.
  records: z.array(z.string().min(1, "records must not be empty strings"))
    .min(1, "records must not be empty").max(
      MAX_RECORDS,
      `records must hold at most ${MAX_RECORDS}`,
    )
    .optional(),
});

/**
 * Lets through only a request with `Authorization: Bearer <token>`, else 401 `unauthorized`; its
 * answer is never cached.
 */
export function adminOnly(token: string): MiddlewareHandler {
  const check = bearerCheck([{ name: "admin", key: token }]);
  return async (c, next) => {
    if ("refused" in check(c.req.header("Authorization"))) {
      c.header("WWW-Authenticate", 'Bearer realm="admin"');
      throw new ApiError("unauthorized", {
        message: "admin routes need Authorization: Bearer <token>",
      });
    }
    await next();
    c.header("Cache-Control", "no-store");
  };
}

/** The admin routes, to mount with `app.route("/admin", adminRoutes(…))`. */
export function adminRoutes(options: AdminOptions): Hono {
  const { deadLetters, overview } = options;
  const app = new Hono();

  app.use("*", adminOnly(options.token));

  app.get("/overview", async (c) => c.json(await overview().catch(queueFailure)));

  app.get("/dead-letters", async (c) => {
    const offset = intParam(c.req.query("offset"), {
      name: "offset",
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      fallback: 0,
    });
    const limit = intParam(c.req.query("limit"), {
      name: "limit",
      min: 1,
      max: MAX_PAGE,
      fallback: 20,
    });
    const page = await deadLetters.list(offset, limit).catch(queueFailure);
    return c.json({
      total: page.total,
      by_reason: page.byReason,
      offset: page.offset,
      letters: page.letters,
    });
  });

  app.post("/dead-letters/requeue", async (c) => {
    const filter = await readFilter(c.req.text());
    const requeued = await deadLetters.requeue(filter).catch(queueFailure);
    return c.json({ requeued });
  });

  app.post("/dead-letters/purge", async (c) => {
    const filter = await readFilter(c.req.text());
    const purged = await deadLetters.purge(filter).catch(queueFailure);
    return c.json({ purged });
  });

  return app;
}

/** Every queue operation of these routes is Redis: its failure is the queue's, a 503. */
function queueFailure(error: unknown): never {
  throw new ApiError("queue_unavailable", {
    message: "queue is unavailable, retry later",
    cause: error,
  });
}

/** What {@linkcode intParam} reads: the parameter's name, its bounds and its default. */
export interface IntParam {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  /** The value when the parameter is absent. */
  readonly fallback: number;
}

/** A whole number query parameter within bounds, its default when absent, else a 400. */
export function intParam(text: string | undefined, { name, min, max, fallback }: IntParam): number {
  if (text === undefined) return fallback;
  const value = /^\d{1,16}$/.test(text) ? Number(text) : NaN;
  if (!(value >= min && value <= max)) {
    throw new ApiError("invalid_query", {
      message: `${name} must be a whole number from ${min} to ${max}`,
    });
  }
  return value;
}

/**
 * The filter in a requeue or purge body, or a 400. The body is required, `{}`
 * included, so that "everything" is always asked for in so many words.
 */
async function readFilter(body: Promise<string>): Promise<DeadLetterFilter> {
  let value: unknown;
  try {
    value = JSON.parse(await body);
  } catch {
    throw new ApiError("invalid_json", {
      message:
        'body must be JSON: {} for every dead letter, {"reason": …}, {"ids": […]} or {"records": […]}',
    });
  }
  const parsed = filterBody.safeParse(value);
  if (!parsed.success) {
    throw new ApiError("invalid_filter", {
      message: parsed.error.issues[0]?.message ?? "bad filter",
    });
  }
  return parsed.data;
}
