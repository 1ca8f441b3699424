/**
 * The message the API pushes and the consumer stores: its shape, the rules a
 * user's name obeys, and the decoding the consumer trusts nothing without.
 *
 * The same rules run at both ends on purpose: the API rejects a bad name with a
 * 400 before anything is queued, and the consumer re-checks every item it pops
 * because the list is writable by anyone with Redis access (a poison message
 * must be buried, never crash the loop).
 *
 * @module
 */

/**
 * The longest name we accept, in Unicode code points after trimming. It
 * matches the `CHECK` constraint in `schema/migrations`, so a name the API
 * accepts always fits the table.
 */
export const NAME_MAX_LENGTH = 200;

/** What travels on the Redis list, JSON-encoded. */
export interface UserEnvelope {
  /** UUIDv7 minted by the API; the row's primary key, so redelivery is idempotent. */
  readonly id: string;
  /** The user's name, already trimmed and validated. */
  readonly name: string;
  /** When the API enqueued the user, in milliseconds since the Unix epoch. */
  readonly enqueued_at: number;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * True for a UUID in the canonical lowercase form the API mints and PostgreSQL
 * prints; the one rule for ids everywhere in the pipeline. Lowercase a user's
 * input before asking.
 */
export function isUuid(text: string): boolean {
  return UUID.test(text);
}

/**
 * Says what is wrong with an already-trimmed name, or returns `undefined` when
 * it is acceptable: non-empty, at most {@link NAME_MAX_LENGTH} code points, no
 * NUL character and no lone UTF-16 surrogate (PostgreSQL `text` can store
 * neither).
 */
export function nameProblem(name: string): string | undefined {
  if (name.length === 0) return "name must not be empty or only whitespace";
  // UTF-16 length bounds the code point count from above, so counting code
  // points is only needed for long names.
  if (name.length > NAME_MAX_LENGTH && codePointCount(name) > NAME_MAX_LENGTH) {
    return `name must be at most ${NAME_MAX_LENGTH} characters`;
  }
  if (name.includes("\0")) return "name must not contain a NUL character (U+0000)";
  if (!name.isWellFormed()) return "name must be valid Unicode (it contains a lone surrogate)";
  return undefined;
}

function codePointCount(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** The fields of an envelope, and the only ones an item may have. */
const ENVELOPE_FIELDS: ReadonlySet<string> = new Set(["id", "name", "enqueued_at"]);

/** Serialises an envelope for LPUSH. */
export function encodeEnvelope(envelope: UserEnvelope): string {
  return JSON.stringify({
    id: envelope.id,
    name: envelope.name,
    enqueued_at: envelope.enqueued_at,
  });
}

/** Thrown by {@link decodeEnvelope} for an item that can never be stored. */
export class PoisonMessageError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "PoisonMessageError";
  }
}

/**
 * Parses and checks one queued item. Anything that is not exactly what
 * {@link encodeEnvelope} writes raises {@link PoisonMessageError} with the
 * reason, which the consumer records in the dead-letter list.
 */
export function decodeEnvelope(raw: string): UserEnvelope {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (error) {
    throw new PoisonMessageError("item is not valid JSON", { cause: error });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new PoisonMessageError("item is not a JSON object");
  }
  const unexpected = Object.keys(value).filter((key) => !ENVELOPE_FIELDS.has(key));
  if (unexpected.length > 0) {
    // The API's own rule for a body (only "name"): an item with more than the
    // envelope was not written by encodeEnvelope, and what else it says would be lost.
    throw new PoisonMessageError(
      `item has unexpected field${unexpected.length > 1 ? "s" : ""} ${
        unexpected.map((key) => JSON.stringify(key)).join(", ")
      }: only "id", "name" and "enqueued_at" are accepted`,
    );
  }
  const { id, name, enqueued_at: enqueuedAt } = value as Record<string, unknown>;
  if (typeof id !== "string" || !isUuid(id)) {
    throw new PoisonMessageError("item has no valid id (a lowercase UUID string)");
  }
  if (typeof name !== "string") throw new PoisonMessageError("item has no string name");
  const problem = nameProblem(name);
  if (problem !== undefined) throw new PoisonMessageError(`item's ${problem}`);
  if (name !== name.trim()) throw new PoisonMessageError("item's name is not trimmed");
  if (typeof enqueuedAt !== "number" || !Number.isFinite(enqueuedAt) || enqueuedAt < 0) {
    throw new PoisonMessageError("item has no valid enqueued_at (milliseconds since the epoch)");
  }
  return { id, name, enqueued_at: enqueuedAt };
}

/**
 * When the API enqueued `item` (ms since the epoch), read leniently for the
 * queue's age: `undefined` for an item that is not JSON or has no numeric
 * `enqueued_at` (one pushed by hand, which the consumer will bury).
 */
export function enqueuedAtOf(item: string): number | undefined {
  try {
    const enqueuedAt = (JSON.parse(item) as { enqueued_at?: unknown } | null)?.enqueued_at;
    return typeof enqueuedAt === "number" && Number.isFinite(enqueuedAt) ? enqueuedAt : undefined;
  } catch {
    return undefined;
  }
}
