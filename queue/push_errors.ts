/**
 * The refusals of a push that did nothing: the queue was at its bound, or an
 * `Idempotency-Key` had already queued another user. The API answers each
 * with its own code (`server/app.ts`).
 *
 * @module
 */

/** Raised by a push when the queue is at its bound. */
export class QueueFullError extends Error {
  constructor(maxLength: number) {
    super(`Cannot enqueue: the queue holds its maximum of ${maxLength} items`);
    this.name = "QueueFullError";
  }
}

/**
 * An `Idempotency-Key` already queued a different user (another name): the
 * request is refused and nothing is pushed.
 */
export class IdempotencyConflictError extends Error {
  override readonly name = "IdempotencyConflictError";
  /** The id the key was first queued under. */
  readonly id: string;

  constructor(id: string) {
    super(`Cannot queue this user as its Idempotency-Key already queued another user (${id})`);
    this.id = id;
  }
}
