/**
 * `Idempotency-Key` on `POST /users` (after the IETF httpapi draft "The
 * Idempotency-Key HTTP Header Field", and Stripe's API): a client names the
 * effect it wants with a key of its own, and every request with that key and
 * the same user gets the answer the first one got, the same id, with nothing
 * queued again, for IDEMPOTENCY_TTL_SECONDS after the first push. So a client
 * that retries every answer other than 202 (a 503, a timeout, a cut
 * connection) with the same key ends with one user, however many tries it
 * took. The key's record is written in the push's own step
 * (`queue/scripts.ts`, ENQUEUE_ONCE), so no key is ever recorded without its
 * user queued or the other way round.
 *
 * @module
 */

import { ApiError } from "./api_error.ts";

/** The header a client names a request's effect with, so that a retry never queues twice. */
export const IDEMPOTENCY_KEY = "Idempotency-Key";

/** The header on a 202 that repeats an earlier request's (same key, same name). */
export const IDEMPOTENT_REPLAYED = "Idempotent-Replayed";

/** Longest Idempotency-Key, in characters (Stripe's bound): room for a UUID or a hash, not a body. */
export const IDEMPOTENCY_KEY_MAX_LENGTH = 255;

/** 1 to 255 visible ASCII characters: no spaces or controls, so it is one token in a Redis key. */
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** The request's key, `undefined` without one; a 400 for a malformed one or one not taken here. */
export function parseIdempotencyKey(
  header: string | undefined,
  taken: boolean,
): string | undefined {
  if (header === undefined) return undefined;
  if (!KEY_PATTERN.test(header)) {
    throw new ApiError("invalid_idempotency_key", {
      message:
        `${IDEMPOTENCY_KEY} must be 1 to ${IDEMPOTENCY_KEY_MAX_LENGTH} visible ASCII characters`,
    });
  }
  if (!taken) {
    throw new ApiError("invalid_idempotency_key", {
      message: `${IDEMPOTENCY_KEY} is not taken by this server, which has no queue to record it in`,
    });
  }
  return header;
}
