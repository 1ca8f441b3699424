/**
 * The API's error answers: every answer other than 2xx is JSON
 * `{"error": message, "code": code}`. The message is for a person and may be
 * reworded at any time; the code is for a program, which branches on it and
 * never on the message. {@linkcode ERROR_CODES} is the one list of codes: the
 * routes throw {@linkcode ApiError} with one of them, `createApp`'s error
 * handler answers it, and the OpenAPI document (`openapi.ts`) lists them.
 *
 * Traefik answers for the API while no replica is ready; it cannot give that
 * answer a JSON body (its error pages come from a backend, and there is none
 * then), so its code travels in a header instead: {@linkcode ERROR_CODE_HEADER}
 * is {@linkcode NO_REPLICA_READY} (`traefik/dynamic/unavailable.yml`).
 *
 * @module
 */

import { HTTPException } from "@hono/hono/http-exception";
import type { ContentfulStatusCode } from "@hono/hono/utils/http-status";

/** What one code means, and the status it is always answered with. */
export interface ErrorCodeInfo {
  readonly status: ContentfulStatusCode;
  readonly description: string;
}

/** Every code of an error answer: its status (one per code) and what it means. */
export const ERROR_CODES = {
  invalid_utf8: { status: 400, description: "The body is not valid UTF-8." },
  invalid_json: { status: 400, description: "The body is not JSON." },
  invalid_body: {
    status: 400,
    description: 'The body is JSON but not an object with exactly a string `"name"`.',
  },
  invalid_name: {
    status: 400,
    description: "The trimmed name is empty, too long, or holds NUL or a lone surrogate.",
  },
  invalid_idempotency_key: {
    status: 400,
    description: "The Idempotency-Key header is not 1 to 255 visible ASCII characters " +
      "(or the server has no queue to record it in, and takes none).",
  },
  invalid_batch: {
    status: 400,
    description: "The body of POST /users/batch is JSON but not an array of users.",
  },
  invalid_ndjson: {
    status: 400,
    description: "A line of an NDJSON batch is blank or not JSON; `line` names it (from 1).",
  },
  invalid_id: { status: 400, description: "The id in the path is not a UUID." },
  invalid_query: {
    status: 400,
    description: "A query parameter is not a whole number in its range.",
  },
  invalid_filter: {
    status: 400,
    description: "A dead-letter filter names an unknown reason or a bad list of ids.",
  },
  key_in_query: {
    status: 400,
    description: "A client key was sent in the query string (`key`, `api_key`, `access_token` " +
      "or `token`), where access logs keep it: it is never accepted there, send it in " +
      "`Authorization: Bearer`.",
  },
  unauthorized: {
    status: 401,
    description: "An admin route without the right `Authorization: Bearer` token.",
  },
  key_missing: {
    status: 401,
    description: "Client keys are configured and the request carries no " +
      "`Authorization: Bearer <key>`; with `WWW-Authenticate`.",
  },
  key_invalid: {
    status: 401,
    description: "The bearer token is no client's key; with " +
      '`WWW-Authenticate: Bearer realm="users", error="invalid_token"`.',
  },
  not_found: { status: 404, description: "No route for this method and path." },
  user_not_found: {
    status: 404,
    description: "No user with this id was accepted (or its dead letter was purged).",
  },
  method_not_allowed: {
    status: 405,
    description: "The path exists but not with this method (see `Allow`).",
  },
  body_too_large: {
    status: 413,
    description: "The body is larger than BODY_LIMIT_BYTES (BATCH_BODY_LIMIT_BYTES for " +
      "POST /users/batch).",
  },
  too_many_items: {
    status: 413,
    description: "A batch holds more than BATCH_MAX_ITEMS users; nothing was queued.",
  },
  unsupported_media_type: {
    status: 415,
    description: "The Content-Type or its charset cannot be read as JSON.",
  },
  idempotency_key_reused: {
    status: 422,
    description: "The Idempotency-Key already queued a user with another name within its " +
      "retention; nothing was queued.",
  },
  empty_batch: { status: 422, description: "A batch holds no user; nothing was queued." },
  invalid_items: {
    status: 422,
    description: "Users of a batch are invalid: `items` lists each by its `index` (from 0) " +
      "with its own code (invalid_body or invalid_name) and message; nothing was queued.",
  },
  rate_limited: {
    status: 429,
    description: "The client sent more users than RATE_LIMIT_USERS_PER_SECOND allows it " +
      "(a batch costs one per user); nothing was queued. Retry-After says when this request " +
      "would fit; RateLimit-Policy and RateLimit say the policy and what is left of it.",
  },
  authorization_too_large: {
    status: 431,
    description: "The Authorization header is longer than 1024 bytes; no key is that long.",
  },
  internal_error: { status: 500, description: "A bug; the replica logged it." },
  queue_full: {
    status: 503,
    description: "The queue is at QUEUE_MAX_LENGTH; the user was not queued.",
  },
  queue_unavailable: {
    status: 503,
    description: "Redis failed or did not answer within REDIS_TIMEOUT_MS. On POST /users the " +
      "push may have run: the answer carries the id it minted (body and Location), and " +
      "GET /users/{id} after Retry-After says queued, stored, dead, or 404 for never queued.",
  },
  unconfirmed: {
    status: 503,
    description: "Pushed, but fewer than REDIS_WAIT_REPLICAS replicas confirmed it in time: " +
      "not accepted, though the user may still be stored. The answer carries the id it " +
      "minted (body and Location), which GET /users/{id} settles after Retry-After.",
  },
  database_unavailable: { status: 503, description: "PostgreSQL could not be reached." },
} as const satisfies Record<string, ErrorCodeInfo>;

/** A code of an error answer (see {@linkcode ERROR_CODES}). */
export type ErrorCode = keyof typeof ERROR_CODES;

/** The body of every error answer. */
export interface ErrorBody {
  /** What is wrong, for a person to read. */
  readonly error: string;
  /** What is wrong, for a program to branch on. */
  readonly code: ErrorCode;
  /**
   * The id a `POST /users` minted, on a refusal that may still have queued
   * its user (`queue_unavailable`, `unconfirmed`): `GET /users/{id}` settles
   * it. Absent on every other answer.
   */
  readonly id?: string;
  /** The NDJSON line (from 1) an `invalid_ndjson` names. */
  readonly line?: number;
  /**
   * A batch's items: the invalid ones of an `invalid_items`, or every item of a batch refused
   * 503, each with the id minted for it.
   */
  readonly items?: readonly ItemError[];
}

/** What went wrong with one item of a batch (`index`) or what happened to it (`id`). */
export interface ItemError {
  /** Its place in the request, from 0, in an `invalid_items`. */
  readonly index?: number;
  /** The id minted for it, in a refused batch. */
  readonly id?: string;
  /** 503, in a refused batch. */
  readonly status?: 503;
  readonly code: ErrorCode;
  /** What is wrong with it, in an `invalid_items`. */
  readonly message?: string;
}

/** What an error answer says besides its code: see {@linkcode ErrorBody}. */
export interface ErrorDetail {
  /** What is wrong, for a person to read. */
  readonly message: string;
  /** The minted id of a user the refusal may have queued. */
  readonly id?: string;
  /** The NDJSON line at fault. */
  readonly line?: number;
  /** A batch's items (see {@linkcode ErrorBody.items}). */
  readonly items?: readonly ItemError[];
}

/** The body of an error answer, for a response built outside the app (`main.ts`). */
export function errorBody(code: ErrorCode, { message, id, line, items }: ErrorDetail): ErrorBody {
  if (line === undefined && items === undefined) {
    return id === undefined ? { error: message, code } : { error: message, code, id };
  }
  return { error: message, code, ...(line === undefined ? { items } : { line }) };
}

/**
 * A refusal the routes throw, answered with its code's status and an
 * {@linkcode ErrorBody} by `createApp`'s error handler, which adds
 * Retry-After to a 503. Any other error is a bug, answered 500 `internal_error`.
 */
export class ApiError extends HTTPException {
  override readonly name = "ApiError";
  readonly code: ErrorCode;
  /** The minted id of a user this refusal may have queued (see {@linkcode ErrorBody}). */
  readonly id?: string;
  /** The NDJSON line at fault (see {@linkcode ErrorBody}). */
  readonly line?: number;
  /** A batch's items (see {@linkcode ErrorBody}). */
  readonly items?: readonly ItemError[];

  constructor(
    code: ErrorCode,
    { message, cause, id, line, items }: ErrorDetail & { readonly cause?: unknown },
  ) {
    super(ERROR_CODES[code].status, { message, cause });
    this.code = code;
    if (id !== undefined) this.id = id;
    if (line !== undefined) this.line = line;
    if (items !== undefined) this.items = items;
  }
}

/** The header that carries the code of an answer Traefik gives itself (it has no JSON body). */
export const ERROR_CODE_HEADER = "X-Error-Code";

/** Traefik's code for its 503 "no available server" while no API replica is ready. */
export const NO_REPLICA_READY = "no_replica_ready";
