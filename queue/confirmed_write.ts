/**
 * A script whose write must be held by replicas before it counts (`WAIT`,
 * REDIS_WAIT_REPLICAS): the replication part of the delivery contract in
 * `redis_queue.ts`.
 *
 * @module
 */

import { Cluster } from "ioredis";
import { type CallOf, type LuaScript, type ReplyOf, runScript } from "./lua_script.ts";
import type { RedisClient } from "./scripts.ts";

/** What {@linkcode WriteUnconfirmedError} reports. */
export interface UnconfirmedWrite {
  /** Replicas asked for. */
  readonly wanted: number;
  /** Replicas that acknowledged the write in time. */
  readonly confirmed: number;
  /** How long `WAIT` waited. */
  readonly timeoutMs: number;
  /** For a push: how many of its users were pushed (the others did not fit). @default 0 */
  readonly pushed?: number;
}

/**
 * Raised when `WAIT` confirmed a write on fewer replicas than asked within
 * the timeout. The write happened on the master and may well survive; it is
 * just not known to survive a failover.
 */
export class WriteUnconfirmedError extends Error {
  /** For a push: how many of its users were pushed (the others did not fit). */
  readonly pushed: number;
  /**
   * For a push with an idempotency key: the id its key is queued under (an
   * earlier request's, when this one found the key seen). Set by the caller.
   */
  queuedAs?: string;

  constructor(what: string, { wanted, confirmed, timeoutMs, pushed = 0 }: UnconfirmedWrite) {
    super(
      `Cannot confirm the ${what} on ${wanted} replicas: ${confirmed} acknowledged it ` +
        `within ${timeoutMs} ms`,
    );
    this.name = "WriteUnconfirmedError";
    this.pushed = pushed;
  }
}

/** A Redis Cluster's answer that a slot is served elsewhere. */
const REDIRECT = /^(MOVED|ASK) /;

/** How many times a confirmed write follows a redirect before it fails. */
const MAX_REDIRECTS = 3;

/** Reloads a cluster client's map of slots to nodes; nothing for a standalone client. */
function refreshSlots(redis: RedisClient): Promise<void> {
  if (!(redis instanceof Cluster)) return Promise.resolve();
  return new Promise((resolve) => redis.refreshSlotsCache(() => resolve()));
}

/** What {@linkcode runConfirmed} runs, and how many replicas must hold it. */
export interface ConfirmedCall<S extends LuaScript> {
  readonly script: S;
  readonly call: CallOf<S>;
  /** Replicas that must acknowledge the write; 0 runs the script alone. */
  readonly replicas: number;
  /** How long `WAIT` may take. */
  readonly timeoutMs: number;
}

/**
 * Runs a script, then, when replicas must confirm it, `WAIT` on the same
 * connection: both in one pipeline, which ioredis sends to the one node
 * serving the script's keys (a Redis Cluster routes a keyless command of a
 * pipeline with the pipeline's slot), so `WAIT` counts the replicas of the
 * master that ran the script. Resolves with the script's reply and how many
 * replicas acknowledged it (`Infinity` when none were asked for).
 */
export async function runConfirmed<S extends LuaScript>(
  redis: RedisClient,
  { script, call, replicas: wanted, timeoutMs }: ConfirmedCall<S>,
): Promise<[reply: ReplyOf<S>, replicas: number]> {
  if (wanted === 0) return [await runScript(redis, script, call), Infinity];
  for (let attempt = 1;; attempt++) {
    const pipeline = redis.pipeline();
    // Only queued: the reply comes from exec().
    runScript(pipeline, script, call);
    pipeline.wait(wanted, timeoutMs);
    const replies = await pipeline.exec();
    const [[scriptError, reply], [waitError, replicas]] = replies as [
      [Error | null, ReplyOf<S>],
      [Error | null, number],
    ];
    // The slot moved (a failover that left the old master alive, a
    // resharding): the script did not run. ioredis follows a redirect for a
    // single command, but not for a pipeline whose WAIT succeeded on the old
    // node, and nothing else makes it refresh its slot map while that node
    // lives; so refresh it here and send the pipeline again.
    if (scriptError && REDIRECT.test(scriptError.message) && attempt < MAX_REDIRECTS) {
      await refreshSlots(redis);
      continue;
    }
    if (scriptError) throw scriptError;
    if (waitError) throw waitError;
    return [reply, replicas];
  }
}
