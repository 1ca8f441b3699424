/**
 * A user's status for `GET /users/<id>`: stored (the row), queued, dead (with
 * the reason) or unknown, from the queue's index and the table.
 *
 * Why the index is read first and the table second: the consumer deletes an
 * id from the index only in its acknowledgement, which runs after PostgreSQL
 * committed the row. So an id that is not in the index when we look is either
 * already in the table, or was never accepted (or its dead letter was
 * purged): the table read that follows cannot miss a user who was stored in
 * between. The other order could: the table says "not yet", then the
 * consumer commits and acknowledges, then the index says "not there", and an
 * accepted user would read as unknown. The converse race is harmless: a user
 * read as queued may have been stored a moment later, which the next poll
 * shows. Each read is one field or one primary-key row, whatever the backlog.
 *
 * @module
 */

import { z } from "zod";
import { DEAD_LETTER_KINDS, type DeadLetter } from "@users-pipeline/queue";
import { type StoredUser, storedUser } from "@users-pipeline/schema";

/**
 * What `GET /users/<id>` answers with 200, as a zod schema so that the type
 * below and the OpenAPI document (`openapi.ts`) cannot disagree; nothing
 * parses with it. Each variant is named so that the document can map the
 * `status` discriminator to it.
 */
export const userStatus = z.discriminatedUnion("status", [
  storedUser.extend({ status: z.literal("stored") }).meta({
    id: "StoredStatus",
    description: "The user is in the table.",
  }),
  z.object({ status: z.literal("queued"), id: z.uuid() }).meta({
    id: "QueuedStatus",
    description: "The user is accepted and waits in the queue (or is being stored).",
  }),
  z.object({
    status: z.literal("dead"),
    id: z.uuid(),
    kind: z.enum(DEAD_LETTER_KINDS).describe("the class of reason"),
    reason: z.string().describe("why the user can never be stored, in detail"),
    sqlstate: z.string().optional().describe("PostgreSQL's error code, when it refused the row"),
    dead_at: z.iso.datetime(),
  }).meta({
    id: "DeadStatus",
    description:
      "The user was dead-lettered: it will not be stored unless an operator requeues it.",
  }),
]).meta({ id: "UserStatus" });

/** What `GET /users/<id>` answers with 200 (see {@linkcode userStatus}). */
export type UserStatus = Readonly<z.infer<typeof userStatus>>;

/** Where a status is read from; `ShardedQueue.indexed` and `findUser` provide them. */
export interface StatusSources {
  /** The id's index entry, or undefined when it has none (absent: no index, the table alone says). */
  readonly indexed?: (id: string) => Promise<"queued" | DeadLetter | undefined>;
  readonly findUser: (id: string) => Promise<StoredUser | undefined>;
}

/**
 * The queue's index could not be read (Redis down, frozen or failing over): the
 * status is unknown for now, which the app answers 503, not "no such user".
 */
export class IndexUnavailableError extends Error {
  override readonly name = "IndexUnavailableError";
}

/**
 * Builds the `userStatus` the app needs: undefined means an id we do not know.
 * A failed index read rejects with {@linkcode IndexUnavailableError}; a failed
 * table read rejects with PostgreSQL's (postgres.js') error as it is, whose
 * code says whether the server could not be reached.
 */
export function userStatusReader(
  sources: StatusSources,
): (id: string) => Promise<UserStatus | undefined> {
  const { indexed } = sources;
  return async (id) => {
    // The order matters; see the module's comment.
    const entry = indexed === undefined ? undefined : await indexed(id).catch((cause) => {
      const message = "Cannot read the status as the queue's index did not answer";
      throw new IndexUnavailableError(message, { cause });
    });
    if (entry === "queued") return { status: "queued", id };
    if (entry !== undefined) {
      return {
        status: "dead",
        id,
        kind: entry.kind ?? "unknown",
        reason: entry.reason,
        ...(entry.sqlstate === undefined ? {} : { sqlstate: entry.sqlstate }),
        dead_at: entry.dead_at,
      };
    }
    const user = await sources.findUser(id);
    return user === undefined ? undefined : { status: "stored", ...user };
  };
}
