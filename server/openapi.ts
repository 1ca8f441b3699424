/**
 * The OpenAPI 3.1 document of the public routes, which `createApp` serves at
 * `GET /openapi.json`: `POST /users`, `GET /users/{id}`, `GET /users`,
 * `GET /healthz`, `GET /readyz`, `GET /metrics` (when the app has metrics)
 * and `GET /openapi.json` itself, and `POST /users/batch` when the app takes batches. With
 * client keys, the routes that need one say so (the `clientKey` bearer scheme, their 401s); with
 * a rate limit, the 429 and the RateLimit headers; `GET /users` exists with the admin token only,
 * and is documented then, under the `adminToken` scheme.
 *
 * It is generated from the zod schemas the code uses: the body schema
 * `POST /users` validates with (`app.ts` hands it over, so the document
 * cannot describe a body the route would refuse), and the schemas the answers'
 * types are inferred from (`user_status.ts`, `schema/users_table.ts`). The
 * routes keep their own validation: their error messages say exactly what is
 * wrong, which a generic validator's would not. `openapi_test.ts` checks the
 * document against the routes the app registers, both ways.
 *
 * The `/admin` routes and the `/dashboard` are left out on purpose: they exist
 * only with ADMIN_TOKEN, they are the operator's tools rather than the API
 * clients build on, and this document is served to anyone without a token,
 * so it should not map them (`admin_routes.ts` documents them).
 *
 * @module
 */

import { OpenAPIHono } from "@hono/zod-openapi";
import { z } from "zod";
import { NAME_MAX_LENGTH } from "@users-pipeline/queue";
import { ERROR_CODE_HEADER, ERROR_CODES, type ErrorCode, NO_REPLICA_READY } from "./api_error.ts";
import { storedUser } from "@users-pipeline/schema";
import { userStatus } from "./user_status.ts";

/** What the document needs to know of one app: what `createApp` was given and validates with. */
export interface OpenApiOptions {
  /** The schema `POST /users` validates its JSON body with. */
  readonly userBody: z.ZodType;
  /** The content types `POST /users` reads as JSON (besides `application/*+json`). */
  readonly contentTypes: Iterable<string>;
  /** Largest body `POST /users` accepts, in bytes. */
  readonly bodyLimitBytes: number;
  /** Largest `limit` of `GET /users`. */
  readonly maxListLimit: number;
  /** `limit` of `GET /users` when the query has none. */
  readonly defaultListLimit: number;
  /** Whether the app serves `GET /metrics`. */
  readonly metrics: boolean;
  /** Whether the app serves `GET /users` (it has an admin token). @default false */
  readonly listing?: boolean;
  /** Whether the client routes need a client key. @default false */
  readonly clientKeys?: boolean;
  /** The `RateLimit-Policy` of the app's rate limit, when it has one. @default none */
  readonly rateLimit?: string;
  /** `POST /users/batch`'s bounds, when the app serves it. @default none */
  readonly batch?: { readonly maxItems: number; readonly bodyLimitBytes: number };
}

/** An OpenAPI 3.1 document, as JSON. */
export type OpenApiDocument = ReturnType<OpenAPIHono["getOpenAPI31Document"]>;

// The answers below are built inline by the routes and the probes (no type
// to infer from), so these schemas only describe them; `openapi_test.ts`
// checks that each documented route answers. The error answers' schemas are
// built from `api_error.ts`, the codes' one list.
const accepted = z.object({ id: z.uuid().describe("the id the API minted (UUIDv7)") })
  .meta({ id: "Accepted", description: "The user is durably queued." });
const batchAccepted = z.object({
  items: z.array(accepted).describe("one per user, in the request's order"),
}).meta({ id: "BatchAccepted", description: "Every user of the batch is durably queued." });
const batchPartly = z.object({
  items: z.array(z.union([
    z.object({ id: z.uuid(), status: z.literal(202) }),
    z.object({
      id: z.uuid(),
      status: z.literal(503),
      code: z.enum(["queue_full", "queue_unavailable", "unconfirmed"]),
    }),
  ])).describe("one per user, in the request's order: 202 queued, or 503 with its code"),
}).meta({ id: "BatchPartlyAccepted" });
/** The extra fields of a batch's error answers: the NDJSON line, the items. */
const batchErrorFields = {
  line: z.int().min(1).optional().describe("with invalid_ndjson: the line at fault, from 1"),
  items: z.array(z.object({
    index: z.int().min(0).optional().describe("with invalid_items: the item's place, from 0"),
    id: z.uuid().optional().describe("on a 503: the id minted for the item"),
    status: z.literal(503).optional(),
    code: z.string().describe("the item's own code"),
    message: z.string().optional(),
  })).optional().describe(
    "with invalid_items: each invalid item; on a 503: every item, with its id and code " +
      "(settled as a single 503 is, by GET /users/{id})",
  ),
};
const userList = z.object({ users: z.array(storedUser).describe("newest first") })
  .meta({ id: "UserList" });

const retryAfter = {
  "Retry-After": { description: "Seconds to wait before retrying", schema: { type: "integer" } },
} as const;
const settleAt = {
  Location: {
    description: "With an `id` in the body: where that user's status is read",
    schema: { type: "string" },
  },
} as const;

const rateLimitHeaders = {
  "RateLimit-Policy": {
    description:
      'draft-ietf-httpapi-ratelimit-headers-10: the policy `"users"`, `q` users at once ' +
      "(RATE_LIMIT_BURST) and `w` the seconds the rate takes to refill them",
    schema: { type: "string" },
  },
  RateLimit: {
    description: 'What is left of the policy: `"users";r=<users now>;t=<seconds until whole>`',
    schema: { type: "string" },
  },
} as const;
const authenticate = {
  "WWW-Authenticate": {
    description: 'Bearer realm="…" (RFC 6750), with error="invalid_token" for a wrong key',
    schema: { type: "string" },
  },
} as const;

/** The codes a client route adds when it needs a client key. */
const KEY_CODES: readonly ErrorCode[] = [
  "key_in_query",
  "key_missing",
  "key_invalid",
  "authorization_too_large",
];

function json(description: string, schema: z.ZodType) {
  return { description, content: { "application/json": { schema } } };
}

/** Every route may answer this: a bug. (A stopping replica never refuses; see `main.ts`.) */
const ANY_ROUTE: readonly ErrorCode[] = ["internal_error"];

/**
 * The error answers a route gives, one per status, each saying which codes it
 * carries and what they mean; the schema lists exactly those codes.
 */
function errors(codes: readonly ErrorCode[], { mayHaveQueued = false, batch = false } = {}) {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of [...codes, ...ANY_ROUTE]) {
    const { status } = ERROR_CODES[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => {
      // A POST's 503 may follow a push that ran: it names the id it minted, to settle it.
      const settleable = mayHaveQueued && status === 503;
      const schema = z.object({
        error: z.string().describe("what is wrong, for a person to read; may be reworded"),
        code: z.enum(list as [ErrorCode, ...ErrorCode[]])
          .describe("what is wrong, for a program to branch on; stable"),
        ...(settleable
          ? {
            id: z.uuid().optional().describe(
              "with queue_unavailable and unconfirmed: the id the API minted; " +
                "GET /users/{id} after Retry-After says whether the user was queued (404: never)",
            ),
          }
          : {}),
        ...(batch ? batchErrorFields : {}),
      });
      const meanings = list.map((code) => `\`${code}\`: ${ERROR_CODES[code].description}`);
      const answer = json(meanings.join(" "), schema);
      if (status === 401) return [status, { ...answer, headers: authenticate }];
      if (status === 429) {
        return [status, { ...answer, headers: { ...retryAfter, ...rateLimitHeaders } }];
      }
      if (status !== 503) return [status, answer];
      return [status, {
        ...answer,
        headers: settleable ? { ...retryAfter, ...settleAt } : retryAfter,
      }];
    }),
  );
}

/** The document for an app built with these options; pure, so `createApp` may build it lazily. */
export function openApiDocument(options: OpenApiOptions): OpenApiDocument {
  const { userBody, bodyLimitBytes, maxListLimit, defaultListLimit } = options;
  // @hono/zod-openapi does not re-export zod-to-openapi's registry and
  // generator; its OpenAPIHono holds both, so one that serves nothing is used
  // for them. The app itself stays a plain Hono with its own validation.
  const spec = new OpenAPIHono();
  const registry = spec.openAPIRegistry;

  // What a client route needs and may answer besides its own: a key, and a rate for pushes.
  const keyed = options.clientKeys === true;
  const keyCodes = keyed ? KEY_CODES : [];
  const security = keyed ? { security: [{ clientKey: [] }] } : {};
  const limited = options.rateLimit !== undefined;
  const pushCodes: readonly ErrorCode[] = [
    ...keyCodes,
    ...(limited ? ["rate_limited"] as const : []),
  ];
  const acceptedHeaders = limited ? rateLimitHeaders : {};
  if (keyed) {
    registry.registerComponent("securitySchemes", "clientKey", {
      type: "http",
      scheme: "bearer",
      description: "A client's key from CLIENT_KEYS_FILE, in `Authorization: Bearer <key>` " +
        "(never in the query string: 400 `key_in_query`); the header at most 1024 bytes.",
    });
  }

  const bodyContent = Object.fromEntries(
    [...options.contentTypes].map((type) => [type, { schema: userBody }]),
  );
  registry.registerPath({
    method: "post",
    path: "/users",
    operationId: "createUser",
    summary: "Accept a user; it is stored asynchronously",
    ...security,
    request: {
      headers: z.object({
        "Idempotency-Key": z.string().regex(/^[\x21-\x7e]{1,255}$/).optional().describe(
          "Optional: 1 to 255 visible ASCII characters naming this request's effect. The same " +
            "key again with the same user (name after trimming) within IDEMPOTENCY_TTL_SECONDS " +
            "of its push gets the same 202 and id, with `Idempotent-Replayed: true`, and " +
            "queues nothing again; with another name, 422 `idempotency_key_reused`. A client " +
            "that retries every non-202 with the same key ends with exactly one user.",
        ),
      }),
      body: {
        required: true,
        description:
          `A JSON object with only a \`name\`, UTF-8, at most ${bodyLimitBytes} bytes. ` +
          `The name is trimmed and must then be 1 to ${NAME_MAX_LENGTH} characters (code points), ` +
          "without NUL or lone surrogates. Any `application/*+json` type is read too, and so is " +
          "form-urlencoded, so that `curl -d` works as written: the body must still be JSON.",
        content: bodyContent,
      },
    },
    responses: {
      202: {
        ...json("Accepted: the user is durably queued", accepted),
        headers: {
          Location: { description: "Where the user's status is read", schema: { type: "string" } },
          "Idempotent-Replayed": {
            description: "`true` when this repeats the answer to an earlier request with the " +
              "same Idempotency-Key (nothing was queued again)",
            schema: { type: "string" },
          },
          ...acceptedHeaders,
        },
      },
      ...errors([
        ...pushCodes,
        "invalid_utf8",
        "invalid_json",
        "invalid_body",
        "invalid_name",
        "body_too_large",
        "unsupported_media_type",
        "invalid_idempotency_key",
        "idempotency_key_reused",
        "queue_full",
        "queue_unavailable",
        "unconfirmed",
      ], { mayHaveQueued: true }),
    },
  });

  if (options.batch !== undefined) {
    const { maxItems, bodyLimitBytes: batchLimit } = options.batch;
    const users = z.array(userBody).min(1).max(maxItems);
    registry.registerPath({
      method: "post",
      path: "/users/batch",
      operationId: "createUsers",
      summary: "Accept many users in one request, with a result per user",
      ...security,
      request: {
        headers: z.object({
          "Idempotency-Key": z.string().regex(/^[\x21-\x7e]{1,255}$/).optional().describe(
            "Optional, as on POST /users: the same key again with the same users (names after " +
              "trimming, in order) gets the same 202 and ids, with `Idempotent-Replayed: true`, " +
              "and queues nothing again; with other users, 422 `idempotency_key_reused`. A keyed " +
              "batch is queued all or none.",
          ),
        }),
        body: {
          required: true,
          description: `1 to ${maxItems} users, each as POST /users takes one, UTF-8, at most ` +
            `${batchLimit} bytes: a JSON array, or NDJSON (\`application/x-ndjson\`, one user a ` +
            "line; the last line may end with a newline, a blank line is refused). Any invalid " +
            "item refuses the whole batch (422 invalid_items, listing each).",
          content: {
            ...Object.fromEntries(
              [...options.contentTypes].map((type) => [type, { schema: users }]),
            ),
            "application/x-ndjson": { schema: z.string().describe("one NewUser a line") },
          },
        },
      },
      responses: {
        202: {
          ...json("Accepted: every user is durably queued", batchAccepted),
          headers: acceptedHeaders,
        },
        207: {
          ...json(
            "Partly accepted: the users of some shards were refused, all or none per shard",
            batchPartly,
          ),
          headers: retryAfter,
        },
        ...errors([
          ...pushCodes,
          "invalid_utf8",
          "invalid_json",
          "invalid_batch",
          "invalid_ndjson",
          "invalid_idempotency_key",
          "body_too_large",
          "too_many_items",
          "unsupported_media_type",
          "empty_batch",
          "invalid_items",
          "idempotency_key_reused",
          "queue_full",
          "queue_unavailable",
          "unconfirmed",
        ], { batch: true }),
      },
    });
  }

  registry.registerPath({
    method: "get",
    path: "/users/{id}",
    operationId: "getUserStatus",
    summary: "Whether a user is stored, still queued or dead-lettered",
    ...security,
    request: { params: z.object({ id: z.uuid().describe("the id `POST /users` answered") }) },
    responses: {
      200: json("The user's status", userStatus),
      ...errors([
        ...keyCodes,
        "invalid_id",
        "user_not_found",
        "queue_unavailable",
        "database_unavailable",
      ]),
    },
  });

  if (options.listing === true) {
    registry.registerComponent("securitySchemes", "adminToken", {
      type: "http",
      scheme: "bearer",
      description: "The operator's ADMIN_TOKEN, in `Authorization: Bearer <token>`.",
    });
    registry.registerPath({
      method: "get",
      path: "/users",
      operationId: "listUsers",
      summary: "The newest stored users (the operator's: it needs the admin token)",
      security: [{ adminToken: [] }],
      request: {
        query: z.object({ limit: z.int().min(1).max(maxListLimit).default(defaultListLimit) }),
      },
      responses: {
        200: json("The newest stored users, newest first", userList),
        ...errors(["unauthorized", "invalid_query", "database_unavailable"]),
      },
    });
  }

  registry.registerPath({
    method: "get",
    path: "/healthz",
    operationId: "healthz",
    summary: "Liveness: the process answers",
    responses: { 200: json("Alive", z.object({ status: z.literal("alive") })) },
  });

  registry.registerPath({
    method: "get",
    path: "/readyz",
    operationId: "readyz",
    summary: "Readiness: the queue (and database) answer and the process is not stopping",
    responses: {
      200: json("Ready", z.object({ status: z.literal("ready") })),
      503: {
        ...json(
          "Not ready (starting, stopping or a dependency does not answer)",
          z.object({ status: z.literal("not ready"), reason: z.string() }),
        ),
        headers: retryAfter,
      },
    },
  });

  if (options.metrics) {
    registry.registerPath({
      method: "get",
      path: "/metrics",
      operationId: "metrics",
      summary: "Prometheus metrics of this replica",
      responses: {
        200: {
          description: "The Prometheus text exposition format",
          content: { "text/plain": { schema: z.string() } },
        },
      },
    });
  }

  registry.registerPath({
    method: "get",
    path: "/openapi.json",
    operationId: "openapi",
    summary: "This document",
    responses: { 200: json("An OpenAPI 3.1 document", z.looseObject({ openapi: z.string() })) },
  });

  return spec.getOpenAPI31Document({
    openapi: "3.1.0",
    info: {
      title: "Users API",
      version: "1",
      description: "Accepts users into a Redis queue that a consumer moves into PostgreSQL; " +
        "a 202 means the user is durably queued. Every answer of the API other than 2xx is " +
        '`{"error": …, "code": …}`: branch on the `code`, never on the message. Every 503 ' +
        "carries Retry-After. While no replica is ready, Traefik in front answers 503 itself, " +
        `as text/plain "no available server", with \`${ERROR_CODE_HEADER}: ${NO_REPLICA_READY}\` ` +
        "and Retry-After.",
    },
  });
}
