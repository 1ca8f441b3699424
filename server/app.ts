/**
 * The HTTP API: `POST /users` validates a user at the edge, hands it to
 * `accept` (which queues it) and answers 202
 * with the id it minted; `POST /users/batch` does the same for many users (`batch_body.ts` reads
 * them), answering 202, or 207/503 with each user's outcome; `GET /users/:id` tells whether the user is stored,
 * queued or dead-lettered (`user_status.ts`); `GET /users?limit=N` lists the
 * newest stored users, to the admin token only; `/admin/…` and the `/dashboard` that shows them exist
 * only with an admin token (`admin_routes.ts`, `dashboard.ts`);
 * `GET /healthz` and `GET /readyz` answer the orchestrator (`runtime/readiness.ts`);
 * `GET /metrics` answers Prometheus (`metrics.ts`); `GET /openapi.json` describes
 * the public routes (`openapi.ts`).
 *
 * Every answer other than 2xx is JSON `{"error": "…", "code": "…"}`: the
 * message says what is wrong, the code (`api_error.ts`) is what clients branch
 * on; every 503 carries Retry-After. Nothing is accepted unless `accept`
 * resolved, so a 202 always means the user is durably queued.
 *
 * With client keys (`clientKeys`, `client_keys.ts`) the routes that take or read users need one:
 * a request without is refused (401, 400 for a key in the query, 431 for an oversized header)
 * before its body is read, so it queues nothing (docs/delivery.md).
 *
 * @module
 */

import { type Context, Hono, type MiddlewareHandler } from "@hono/hono";
import { HTTPException } from "@hono/hono/http-exception";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import {
  IdempotencyConflictError,
  isUuid,
  nameProblem,
  QueueFullError,
  type UserEnvelope,
  WriteUnconfirmedError,
} from "@users-pipeline/queue";
import {
  abortable,
  DeadlineError,
  SharedDeadline,
  timeoutSignal,
} from "@users-pipeline/runtime/deadline";
import { aliveResponse, Readiness } from "@users-pipeline/runtime/readiness";
import { isUnreachable } from "@users-pipeline/runtime/postgres_options";
import type { StoredUser } from "@users-pipeline/schema";
import { ApiError, errorBody, type ErrorCode, type ItemError } from "./api_error.ts";
import { NDJSON, parseBatch } from "./batch_body.ts";
import { IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, parseIdempotencyKey } from "./idempotency_key.ts";
import { adminOnly, type AdminOptions, adminRoutes, intParam } from "./admin_routes.ts";
import { ANONYMOUS, bearerCheck, type ClientKey } from "./client_keys.ts";
import { type RateLimit, rateLimitHeader } from "./rate_limit.ts";
import { dashboardRoutes } from "./dashboard.ts";
import { type OpenApiDocument, openApiDocument } from "./openapi.ts";
import { IndexUnavailableError, type UserStatus } from "./user_status.ts";
import type { ApiMetrics } from "./metrics.ts";

/**
 * The query parameters a client might put its key in. A key there ends up in every access log on
 * the way, so such a request is refused (400 `key_in_query`) and the key never accepted.
 */
const KEY_PARAMS = ["key", "api_key", "access_token", "token"];

/** A request refused for its credentials, for the log: never the key itself. */
export interface CredentialRefusal {
  readonly code: "key_missing" | "key_invalid" | "key_in_query" | "authorization_too_large";
  /** Where it came from: the address Traefik forwards (X-Real-Ip), else the socket's peer. */
  readonly address: string;
}

/** What the app needs from the outside world; `main.ts` wires the real clients. */
export interface AppOptions {
  /** Durably queues (or stores) a validated user; rejects if it could not. */
  accept(user: UserEnvelope): Promise<void>;
  /**
   * A request with an `Idempotency-Key`: `newId` mints its id (where the key
   * needs it), `accept` queues the user once per key and resolves with the id
   * the key is queued under (this user's, or an earlier request's with the
   * same name); rejects with `IdempotencyConflictError` for another name, and
   * as {@linkcode accept} otherwise. Absent: such a request is refused (400).
   * @default none
   */
  acceptOnce?: {
    newId(key: string): string;
    accept(user: UserEnvelope, key: string): Promise<string>;
  };
  /**
   * A user's status (`user_status.ts`); undefined for an id we do not know.
   * Rejects with `IndexUnavailableError` when the queue's index cannot be
   * read, or with PostgreSQL's error when it cannot be reached: both are a 503.
   */
  userStatus(id: string): Promise<UserStatus | undefined>;
  /** The `limit` newest stored users, newest first; an unreachable PostgreSQL is a 503. */
  listUsers(limit: number): Promise<StoredUser[]>;
  /** The `/admin` routes and `GET /users`; absent (404) without. @default none */
  admin?: AdminOptions;
  /**
   * The clients' keys (CLIENT_KEYS_FILE). With any, `POST /users`, `POST /users/batch` and
   * `GET /users/:id` need `Authorization: Bearer <key>`, and a request's client is its key's name.
   * @default none: anyone may call them, as the client {@linkcode ANONYMOUS}
   */
  clientKeys?: readonly ClientKey[];
  /**
   * The rate per client of `POST /users` and `POST /users/batch`, in users (`rate_limit.ts`):
   * over it, 429 `rate_limited`; a failure of it (Redis) is the push's 503 `queue_unavailable`.
   * @default none: no limit
   */
  rateLimit?: RateLimit;
  /** Called with each request refused for its credentials (for the log). @default nothing */
  onCredentialRefused?(refusal: CredentialRefusal): void;
  /**
   * Longest wait for `accept` before answering 503 "queue is unavailable".
   * A bound of the app's own, whatever the client library does with its
   * timeouts (ioredis' auto-pipelining can hold a command past its
   * `commandTimeout`): the answer never waits longer. `accept` must make its
   * own late effect void (the queue's enqueue deadline does).
   * @default Infinity
   */
  acceptTimeoutMs?: number;
  /**
   * `POST /users/batch` (its keyed form uses {@linkcode acceptOnce}'s `newId`); absent: the route
   * answers 404. @default none
   */
  batch?: BatchOptions;
  /** Answers `GET /readyz`. @default ready whenever the app answers */
  readiness?: Readiness;
  /** Largest accepted body in bytes. @default 16384 */
  bodyLimitBytes?: number;
  /**
   * Most bytes of a body over `bodyLimitBytes` read and thrown away before its 413; past it the
   * connection is closed unread. @default {@linkcode OVERSIZED_BODY_DISCARD_BYTES}
   */
  discardLimitBytes?: number;
  /** Seconds a client should wait after a 503. @default 1 */
  retryAfterSeconds?: number;
  /** Called with an error no handler expected, answered 500 (a bug, so it is logged). */
  onUnexpectedError?(error: unknown): void;
  /** Mints ids. @default uuid v7 */
  newId?: () => string;
  /** Counts every request and serves `GET /metrics`. @default no metrics, no /metrics route */
  metrics?: ApiMetrics;
}

/** How the app queues a batch: `queue_accept.ts` wires `ShardedQueue`'s batch pushes. */
export interface BatchOptions {
  /**
   * Queues `users`, each shard's share all or none, `bound` racing each shard's call; resolves
   * with each user's outcome in order: `undefined` when queued, else why not (a push's error).
   */
  accept(
    users: readonly UserEnvelope[],
    bound: <T>(work: Promise<T>) => Promise<T>,
  ): Promise<unknown[]>;
  /**
   * Queues `users` (ids minted for `key`), all or none, once per key; resolves with the ids the
   * key is queued under; rejects as {@linkcode AppOptions.acceptOnce}'s `accept`.
   */
  acceptOnce(users: readonly UserEnvelope[], key: string): Promise<string[]>;
  /** Most users in one batch. @default 1000 */
  maxItems?: number;
  /** Largest batch body in bytes. @default 1048576 */
  bodyLimitBytes?: number;
}

// curl -d sends application/x-www-form-urlencoded; the course's command must
// work as written, so that type is read as JSON too (the body must still be JSON).
const ACCEPTED_TYPES = new Set([
  "application/json",
  "text/plain",
  "application/x-www-form-urlencoded",
]);

// The id names it in the OpenAPI document (`openapi.ts`); validation is unchanged.
const userBody = z.strictObject({ name: z.string() }).meta({ id: "NewUser" });

/** Most users in one batch without `batch.maxItems` (BATCH_MAX_ITEMS' default). */
const DEFAULT_BATCH_ITEMS = 1_000;
/** Largest batch body without `batch.bodyLimitBytes` (BATCH_BODY_LIMIT_BYTES' default). */
const DEFAULT_BATCH_BODY_BYTES = 1_048_576;

/** What a batch may be sent as: what `POST /users` takes, and NDJSON. */
const BATCH_TYPES = new Set([...ACCEPTED_TYPES, NDJSON]);

/**
 * A batch refused 503 names the least settled of its items' codes: `queue_unavailable` (the push
 * may have run), then `unconfirmed` (it ran), then `queue_full` (it did not).
 */
const REFUSAL_ORDER: readonly ErrorCode[] = ["queue_unavailable", "unconfirmed", "queue_full"];

/** Most users one `GET /users?limit=N` lists: a page, not an export. */
export const MAX_LIST_LIMIT = 1_000;

/**
 * How much of a body over the limit the API reads, and throws away, before it answers 413. Many
 * clients (Python's http.client among them) write the whole request before they read the answer,
 * and such a client reads the 413 only once its body was taken to the end: a connection closed on
 * unread bytes is reset, and the reset loses the answer. Traefik (Go's HTTP server) closes the
 * client's connection when more than 256 KiB of the body is left unread after the answer, so the
 * API itself reads the body before it answers.
 * 16 MiB covers what a client sends by mistake (a file in place of a name) at the cost of reading
 * it; a larger body is not worth a replica's time: its connection is closed without reading the
 * rest, and the client sees the connection cut instead of the 413.
 */
export const OVERSIZED_BODY_DISCARD_BYTES = 16 * 1024 * 1024;

/** Users `GET /users` lists without a `limit`. */
const DEFAULT_LIST_LIMIT = 20;

/** Builds the app; no I/O happens here, so tests drive it with `app.request()`. */
export function createApp(options: AppOptions): Hono {
  const {
    accept,
    acceptOnce,
    userStatus,
    listUsers,
    admin,
    acceptTimeoutMs = Infinity,
    readiness = new Readiness({}, { timeoutMs: 0 }),
    bodyLimitBytes = 16_384,
    discardLimitBytes = OVERSIZED_BODY_DISCARD_BYTES,
    retryAfterSeconds = 1,
    onUnexpectedError = () => {},
    newId = uuidv7,
    metrics,
    batch,
    clientKeys = [],
    onCredentialRefused = () => {},
    rateLimit,
  } = options;
  const app = new Hono();
  const identify = clientKeys.length === 0 ? anonymous : keyed(clientKeys, onCredentialRefused);
  const limits = { body: bodyLimitBytes, discard: discardLimitBytes };
  // Every push waits at most the same bound: one timer for all of them.
  const deadline = acceptTimeoutMs === Infinity ? undefined : new SharedDeadline({
    ms: acceptTimeoutMs,
    what: "accept the user as the queue is too slow",
  });
  const inTime = <T>(work: Promise<T>) => deadline === undefined ? work : deadline.race(work);

  /** A request admitted without a rate limit: its push races the shared deadline. */
  const free: Admission = { bound: inTime, late: () => undefined, [Symbol.dispose]: () => {} };

  /**
   * Takes `cost` users from the rate of the request's client (its key's name, else its address)
   * and sets the RateLimit headers; a 429 `rate_limited` over it, nothing taken and nothing pushed
   * (docs/delivery.md, "What each answer means for the client"). Rejects with the limit's own
   * failure when Redis does not answer it in time. The admission's bound then covers the push too,
   * so the answer still comes within `acceptTimeoutMs` of the limit's call.
   */
  const admit = async (c: Context, cost: number): Promise<Admission> => {
    // An empty batch takes nothing (its 422 comes next).
    if (rateLimit === undefined || cost === 0) return free;
    const client = c.get("client");
    const timeout = timeoutSignal(acceptTimeoutMs);
    const started = performance.now();
    try {
      const subject = clientKeys.length > 0 ? client : sourceAddress(c);
      const decision = await abortable(rateLimit.take(subject, cost), timeout.signal);
      c.header("RateLimit-Policy", rateLimit.policy);
      c.header("RateLimit", rateLimitHeader(decision));
      if (!decision.allowed) {
        metrics?.countClient(client, "rate_limited", cost);
        c.header("Retry-After", String(decision.retryAfterSeconds));
        throw new ApiError("rate_limited", {
          message: `over this client's rate: ${cost} users fit in ${decision.retryAfterSeconds} s`,
        });
      }
    } catch (error) {
      timeout[Symbol.dispose]();
      throw error;
    }
    return {
      bound: (work) => abortable(work, timeout.signal),
      // The queue voids a push Redis runs later than half the bound after it was sent (`main.ts`):
      // one sent with less than half of it left could queue a user after its 503.
      late: () =>
        performance.now() - started > acceptTimeoutMs / 2
          ? new DeadlineError("Cannot push the users in time as the rate limit answered late", 0)
          : undefined,
      [Symbol.dispose]: () => timeout[Symbol.dispose](),
    };
  };

  /**
   * Queues the user `name` within the deadline, once per `key` when there is one: the id it is
   * queued under, and whether an earlier request with the key queued it.
   */
  const acceptUser = async (c: Context, name: string, key: string | undefined) => {
    const id = key === undefined ? newId() : acceptOnce!.newId(key);
    const user = { id, name, enqueued_at: Date.now() };
    try {
      using admission = await admit(c, 1);
      const late = admission.late();
      if (late !== undefined) throw late;
      if (key === undefined) {
        await admission.bound(accept(user));
        return { id, replayed: false };
      }
      const queuedAs = await admission.bound(acceptOnce!.accept(user, key));
      return { id: queuedAs, replayed: queuedAs !== id };
    } catch (error) {
      throw refusalOf(error, id);
    }
  };

  /**
   * The 503 to a batch whose rate could not be read: nothing was validated or pushed, and each of
   * its `count` users gets an id that `GET /users/{id}` settles (404: never queued).
   */
  const unadmitted = (error: unknown, count: number, key: string | undefined, client: string) => {
    if (error instanceof ApiError) return error;
    const { code } = refusalOf(error, undefined);
    metrics?.countBatch(client, 0, Array(count).fill(code));
    return refusedBatch(
      Array.from({ length: count }, () => ({
        id: key === undefined ? newId() : acceptOnce!.newId(key),
        status: 503 as const,
        code,
      })),
    );
  };

  if (metrics !== undefined) {
    // First, so that it times the whole answer and sees every request, matched or not.
    app.use(metrics.middleware);
    app.get("/metrics", () => metrics.response());
  }

  app.get("/healthz", () => aliveResponse());
  app.get("/readyz", () => readiness.response());

  app.post("/users", identify, async (c) => {
    checkContentType(c.req.header("Content-Type"));
    const body = await readBody(c, limits);
    const key = parseIdempotencyKey(c.req.header(IDEMPOTENCY_KEY), acceptOnce !== undefined);
    const { id, replayed } = await acceptUser(c, parseUser(decodeBody(body)), key);
    // A repeat of a key's request says so (as Stripe's API does), so that nobody counts it twice.
    if (replayed) c.header(IDEMPOTENT_REPLAYED, "true");
    c.header("Location", `/users/${id}`);
    return c.json({ id }, 202);
  });

  if (batch !== undefined) {
    const batchLimits = {
      body: batch.bodyLimitBytes ?? DEFAULT_BATCH_BODY_BYTES,
      discard: discardLimitBytes,
    };
    const maxItems = batch.maxItems ?? DEFAULT_BATCH_ITEMS;
    app.post("/users/batch", identify, async (c) => {
      const type = checkContentType(c.req.header("Content-Type"), BATCH_TYPES);
      const body = decodeBody(await readBody(c, batchLimits));
      const key = parseIdempotencyKey(c.req.header(IDEMPOTENCY_KEY), acceptOnce !== undefined);
      const values = parseBatch(body, { ndjson: type === NDJSON, maxItems });
      const client = c.get("client");
      // Counted before they are validated: a batch over the rate costs no more than its parse.
      using admission = await admit(c, values.length).catch((error) => {
        throw unadmitted(error, values.length, key, client);
      });
      const names = batchNames(values);
      const enqueuedAt = Date.now();
      const users = names.map((name) => ({
        id: key === undefined ? newId() : acceptOnce!.newId(key),
        name,
        enqueued_at: enqueuedAt,
      }));
      const late = admission.late();
      if (key !== undefined) {
        const push = late === undefined
          ? admission.bound(batch.acceptOnce(users, key))
          : Promise.reject(late);
        const ids = await push.catch((error) => {
          const refusal = refusalOf(error, undefined);
          if (refusal.status !== 503) throw refusal;
          // Every id the key is queued under (or was to be): a retry with the key settles them.
          const ids = (error as WriteUnconfirmedError).queuedAsAll ?? users.map((user) => user.id);
          metrics?.countBatch(client, 0, ids.map(() => refusal.code));
          throw refusedBatch(ids.map((id) => ({ id, status: 503, code: refusal.code })));
        });
        const replayed = ids[0] !== users[0]!.id;
        if (replayed) c.header(IDEMPOTENT_REPLAYED, "true");
        else metrics?.countBatch(client, users.length, []);
        return c.json({ items: ids.map((id) => ({ id })) }, 202);
      }
      const outcomes = late === undefined
        ? await batch.accept(users, admission.bound)
        : users.map(() => late);
      const items = users.map(({ id }, i) =>
        outcomes[i] === undefined
          ? { id, status: 202 as const }
          : { id, status: 503 as const, code: refusalOf(outcomes[i], id).code }
      );
      const refused = items.flatMap((item) => item.status === 503 ? [item.code] : []);
      metrics?.countBatch(client, users.length - refused.length, refused);
      if (refused.length === 0) return c.json({ items: users.map(({ id }) => ({ id })) }, 202);
      if (refused.length === users.length) throw refusedBatch(items as ItemError[]);
      c.header("Retry-After", String(retryAfterSeconds));
      return c.json({ items }, 207);
    });
  }

  app.get("/users/:id", identify, async (c) => {
    const id = c.req.param("id").toLowerCase();
    if (!isUuid(id)) throw new ApiError("invalid_id", { message: "id must be a UUID" });
    const status = await userStatus(id).catch(readFailure);
    if (status === undefined) {
      throw new ApiError("user_not_found", { message: "no user with this id was accepted" });
    }
    return c.json(status);
  });

  // The stored names are the operator's to read: the listing exists with the admin token only.
  if (admin !== undefined) {
    app.get("/users", adminOnly(admin.token), async (c) => {
      const limit = intParam(c.req.query("limit"), {
        name: "limit",
        min: 1,
        max: MAX_LIST_LIMIT,
        fallback: DEFAULT_LIST_LIMIT,
      });
      return c.json({ users: await listUsers(limit).catch(readFailure) });
    });
  }

  // Built at the first request rather than here: most apps (every test's) never serve it.
  let document: OpenApiDocument | undefined;
  app.get("/openapi.json", (c) =>
    c.json(
      document ??= openApiDocument({
        userBody,
        contentTypes: ACCEPTED_TYPES,
        bodyLimitBytes,
        maxListLimit: MAX_LIST_LIMIT,
        defaultListLimit: DEFAULT_LIST_LIMIT,
        listing: admin !== undefined,
        clientKeys: clientKeys.length > 0,
        rateLimit: rateLimit?.policy,
        metrics: metrics !== undefined,
        batch: batch === undefined ? undefined : {
          maxItems: batch.maxItems ?? DEFAULT_BATCH_ITEMS,
          bodyLimitBytes: batch.bodyLimitBytes ?? DEFAULT_BATCH_BODY_BYTES,
        },
      }),
    ));

  if (admin !== undefined) {
    app.route("/admin", adminRoutes(admin));
    // The dashboard shows the admin routes' data, so it exists with them (`dashboard.ts`).
    app.route("/", dashboardRoutes());
  }

  app.on(["PUT", "PATCH", "DELETE"], "/users", (c) => {
    c.header("Allow", "POST");
    throw new ApiError("method_not_allowed", {
      message: `${c.req.method} is not allowed on /users`,
    });
  });
  if (batch !== undefined) {
    app.on(["PUT", "PATCH", "DELETE"], "/users/batch", (c) => {
      c.header("Allow", "POST");
      throw new ApiError("method_not_allowed", {
        message: `${c.req.method} is not allowed on /users/batch`,
      });
    });
  }

  app.notFound((c) =>
    c.json(errorBody("not_found", { message: `no route for ${c.req.method} ${c.req.path}` }), 404)
  );

  app.onError((error, c) => {
    if (error instanceof ApiError) {
      if (error.status === 503) c.header("Retry-After", String(retryAfterSeconds));
      if (error.id !== undefined) c.header("Location", `/users/${error.id}`);
      return c.json(errorBody(error.code, error), error.status);
    }
    // An answer built whole where the request was refused (the 413 that drops its connection).
    if (error instanceof HTTPException) return error.getResponse();
    onUnexpectedError(error);
    return c.json(errorBody("internal_error", { message: "internal error" }), 500);
  });

  return app;
}

/** How a request admitted by the rate limit pushes (`createApp`'s `admit`); disposed after. */
interface Admission extends Disposable {
  /** Races `work` (a push) with the request's bound. */
  bound<U>(work: Promise<U>): Promise<U>;
  /** Why a push must not start any more (too little of the bound is left), if so. */
  late(): Error | undefined;
}

/** Without client keys every request is {@linkcode ANONYMOUS}'s. */
const anonymous: MiddlewareHandler = (c, next) => {
  c.set("client", ANONYMOUS);
  return next();
};

/**
 * Lets through a request whose bearer token is one of `keys`, as that key's client; refuses
 * any other before its body is read, and tells `onRefused`.
 */
function keyed(
  keys: readonly ClientKey[],
  onRefused: (refusal: CredentialRefusal) => void,
): MiddlewareHandler {
  const check = bearerCheck(keys);
  return async (c, next) => {
    const refuse = (code: CredentialRefusal["code"], message: string) => {
      onRefused({ code, address: sourceAddress(c) });
      return new ApiError(code, { message });
    };
    if (KEY_PARAMS.some((name) => c.req.query(name) !== undefined)) {
      throw refuse("key_in_query", "send the key in Authorization: Bearer, never in the query");
    }
    const bearer = check(c.req.header("Authorization"));
    if ("refused" in bearer) {
      if (bearer.refused === "authorization_too_large") {
        throw refuse(bearer.refused, "the Authorization header is too long to hold a key");
      }
      // RFC 6750: no error code when no credentials came, `invalid_token` for a wrong one.
      const error = bearer.refused === "key_invalid" ? ', error="invalid_token"' : "";
      c.header("WWW-Authenticate", `Bearer realm="users"${error}`);
      throw refuse(
        bearer.refused,
        bearer.refused === "key_invalid"
          ? "the bearer token is no client's key"
          : "this route needs Authorization: Bearer <key>",
      );
    }
    c.set("client", bearer.client);
    await next();
  };
}

/** A plausible IP address as text: what Traefik writes in X-Real-Ip. */
const ADDRESS = /^[0-9A-Fa-f:.]{2,45}$/;

/**
 * Who sent a request: the address Traefik forwards in X-Real-Ip (Traefik sets it to the peer of
 * its own connection and trusts no client's), else the socket's peer (a direct caller).
 */
export function sourceAddress(c: Context): string {
  const forwarded = c.req.header("X-Real-Ip");
  if (forwarded !== undefined && ADDRESS.test(forwarded)) return forwarded;
  const info = c.env as Deno.ServeHandlerInfo<Deno.NetAddr> | undefined;
  return info?.remoteAddr?.hostname ?? "unknown";
}

/**
 * A refusal of a push as its answer; `id` is the id the user was to be queued under (none for a
 * batch, whose answer lists its items' ids).
 */
function refusalOf(error: unknown, id: string | undefined): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof QueueFullError) {
    return new ApiError("queue_full", { message: "queue is full, retry later", cause: error });
  }
  if (error instanceof IdempotencyConflictError) {
    return new ApiError("idempotency_key_reused", {
      message: `${IDEMPOTENCY_KEY} was already used for a user with another name`,
      cause: error,
    });
  }
  // Either refusal may follow a push that ran (unconfirmed: it did; unavailable: the reply was
  // lost or late), so it names the id: GET /users/{id} settles what happened.
  if (error instanceof WriteUnconfirmedError) {
    // Pushed, but not known to survive a failover: not accepted (it may still be stored).
    return new ApiError("unconfirmed", {
      message: "queue could not confirm the user on enough replicas, retry later",
      cause: error,
      // A key seen before is queued under its first request's id, which settles it.
      id: error.queuedAs ?? id,
    });
  }
  return new ApiError("queue_unavailable", {
    message: "queue is unavailable, retry later",
    cause: error,
    id,
  });
}

/** The 503 to a batch none of whose `items` was queued, under the least settled of their codes. */
function refusedBatch(items: readonly ItemError[]): ApiError {
  const code = REFUSAL_ORDER.find((code) => items.some((item) => item.code === code)) ??
    items[0]!.code;
  return new ApiError(code, {
    message: "no user of the batch was queued, retry later: each item says why",
    items,
  });
}

/**
 * The trimmed names of a batch's items; a 422 when it is empty, or listing every invalid item
 * (by index, with the code and message `POST /users` would answer it) when any is.
 */
function batchNames(values: readonly unknown[]): string[] {
  if (values.length === 0) {
    throw new ApiError("empty_batch", { message: "a batch must hold at least one user" });
  }
  const invalid: ItemError[] = [];
  const names = values.map((value, index) => {
    const checked = checkUser(value, "item");
    if (typeof checked !== "string") invalid.push({ index, ...checked });
    return checked as string;
  });
  if (invalid.length > 0) {
    throw new ApiError("invalid_items", {
      message: `${invalid.length} of the ${values.length} users are invalid: nothing was queued`,
      items: invalid,
    });
  }
  return names;
}

/** The most bytes of a body accepted (`body`), and read before its 413 (`discard`). */
interface BodyLimits {
  readonly body: number;
  readonly discard: number;
}

type BodyReader = ReadableStreamDefaultReader<Uint8Array<ArrayBuffer>> | undefined;

/**
 * The request's body, up to `limits.body`; over it, a 413 (see {@linkcode refuseTooLarge}). A body
 * with a Content-Length is checked on the header and, within the limit, read whole: the stream a
 * look at `c.req.raw.body` makes Deno build costs the common request time. A body without one
 * (chunked) is read as a stream, up to the limit.
 */
async function readBody(c: Context, limits: BodyLimits): Promise<ArrayBuffer> {
  const length = c.req.header("Content-Length");
  if (length !== undefined && c.req.header("Transfer-Encoding") === undefined) {
    if (Number(length) <= limits.body) return await c.req.arrayBuffer();
    // A length over the bound says the body goes past it: none of it is read.
    const read = Number(length) > limits.discard ? Infinity : 0;
    return await refuseTooLarge(c.req.raw.body?.getReader(), read, limits);
  }
  const reader = c.req.raw.body?.getReader();
  const chunks: Uint8Array<ArrayBuffer>[] = [];
  let size = 0;
  for (;;) {
    const chunk = await reader?.read();
    if (chunk === undefined || chunk.done) return await new Blob(chunks).arrayBuffer();
    size += chunk.value.byteLength;
    if (size > limits.body) await refuseTooLarge(reader, size, limits);
    chunks.push(chunk.value);
  }
}

/**
 * The 413 to a body over the limit (`read` bytes of it so far), once read to its end; past
 * `limits.discard`, one that ends its connection ({@linkcode cutAfter}): Deno itself would
 * otherwise read the rest of the body after the answer, however long it is.
 */
async function refuseTooLarge(
  reader: BodyReader,
  read: number,
  limits: BodyLimits,
): Promise<never> {
  const message = `request body must be at most ${limits.body} bytes`;
  if (await discard(reader, read, limits.discard)) {
    throw new ApiError("body_too_large", { message });
  }
  throw new HTTPException(413, {
    res: cutAfter(JSON.stringify(errorBody("body_too_large", { message }))),
  });
}

/**
 * Reads and throws away the rest of a body (`read` bytes of it so far) if it ends within `limit`
 * bytes in all, and says whether it did; if not, cancels the rest. A body that cannot be read
 * further (the client went away) counts as ended: nothing is left to cut.
 */
async function discard(reader: BodyReader, read: number, limit: number): Promise<boolean> {
  try {
    while (read <= limit) {
      const chunk = await reader?.read();
      if (chunk === undefined || chunk.done) return true;
      read += chunk.value.byteLength;
    }
    await reader?.cancel();
    return false;
  } catch {
    return true;
  }
}

/**
 * A 413 with `json` as its body, after which the connection is dropped instead of kept: the body
 * stream fails once its bytes are out, and Deno then closes the connection, leaving the rest of
 * the request unread. Its error is a `Deno.errors.ConnectionAborted`, which `graceful_server.ts`
 * knows not to report.
 */
function cutAfter(json: string): Response {
  let sent = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent) {
        controller.error(new Deno.errors.ConnectionAborted("request body over the discard bound"));
      } else {
        controller.enqueue(new TextEncoder().encode(json));
        sent = true;
      }
    },
  });
  return new Response(body, { status: 413, headers: { "Content-Type": "application/json" } });
}

/**
 * A failed read as its answer: a 503 while the queue's index or PostgreSQL
 * does not answer (a retry may succeed); anything else is a bug, left to the
 * error handler's 500.
 */
function readFailure(error: unknown): never {
  if (error instanceof IndexUnavailableError) {
    throw new ApiError("queue_unavailable", {
      message: "queue is unavailable, retry later",
      cause: error,
    });
  }
  if (isUnreachable(error)) {
    throw new ApiError("database_unavailable", {
      message: "database is unavailable, retry later",
      cause: error,
    });
  }
  throw error;
}

/**
 * 415 for a body type we cannot read (`header`: the request's Content-Type; `accepted`: the types
 * besides `application/*+json`); the type, lowercased, when there is one.
 */
function checkContentType(
  header: string | undefined,
  accepted: ReadonlySet<string> = ACCEPTED_TYPES,
): string | undefined {
  if (header === undefined) return undefined;
  const [type = "", ...params] = header.split(";").map((part) => part.trim().toLowerCase());
  const charset = params.find((p) => p.startsWith("charset="))?.slice(8).replaceAll('"', "");
  if (!(accepted.has(type) || /^application\/[a-z0-9.+-]+\+json$/.test(type))) {
    throw new ApiError("unsupported_media_type", {
      message: `Content-Type ${type || "(empty)"} is not supported: send application/json`,
    });
  }
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8") {
    throw new ApiError("unsupported_media_type", {
      message: `charset ${charset} is not supported: send utf-8`,
    });
  }
  return type;
}

// Fatal: the lenient decoding of `c.req.text()` would turn bytes that are not
// UTF-8 (a lone surrogate encoded as ED A0 80, say) into U+FFFD and accept a
// name the client never sent, instead of saying what is wrong with it.
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The body as text, or a 400 when it is not valid UTF-8. */
function decodeBody(bytes: ArrayBuffer): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ApiError("invalid_utf8", { message: "body must be valid UTF-8" });
  }
}

/** The trimmed, valid name from a request body, or a 400 saying what is wrong. */
export function parseUser(body: string): string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new ApiError("invalid_json", {
      message: 'body must be valid JSON such as {"name": "Ada"}',
    });
  }
  const checked = checkUser(value, "body");
  if (typeof checked !== "string") throw new ApiError(checked.code, checked);
  return checked;
}

/**
 * The trimmed, valid name of a user parsed from JSON (`what`: the body, or an item of a batch),
 * or the code and message of what is wrong with it.
 */
function checkUser(
  value: unknown,
  what: string,
): string | { code: "invalid_body" | "invalid_name"; message: string } {
  const parsed = userBody.safeParse(value);
  if (!parsed.success) {
    return { code: "invalid_body", message: describeIssue(parsed.error.issues[0], value, what) };
  }
  const name = parsed.data.name.trim();
  const problem = nameProblem(name);
  return problem === undefined ? name : { code: "invalid_name", message: problem };
}

function describeIssue(issue: z.core.$ZodIssue | undefined, value: unknown, what: string): string {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return `${what} must be a JSON object such as {"name": "Ada"}`;
  }
  if (issue?.code === "unrecognized_keys") {
    return `unexpected field${issue.keys.length > 1 ? "s" : ""} ${
      issue.keys.map((key) => JSON.stringify(key)).join(", ")
    }: only "name" is accepted`;
  }
  if (!("name" in value)) return 'field "name" is required';
  return 'field "name" must be a string';
}
