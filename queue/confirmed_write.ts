/**
 * A script whose write must be held by replicas before it counts (`WAIT`,
 * REDIS_WAIT_REPLICAS), as `docs/scaling.md#failover-and-redis_wait_replicas`
 * describes.
 *
 * @module
 */

import calculateSlot from "cluster-key-slot";
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
  /**
   * For a push of several users with an idempotency key: every id its key is
   * queued under, in order ({@linkcode queuedAs} is the first). Set by the caller.
   */
  queuedAsAll?: readonly string[];

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

/** Options of {@linkcode ConfirmedWrites}. */
export interface ConfirmedWritesOptions {
  /** Replicas that must acknowledge each write; 0 runs each script alone. */
  readonly replicas: number;
  /** How long each `WAIT` may take. */
  readonly timeoutMs: number;
}

/** A write waiting for its turn, or being redirected. */
interface Pending {
  readonly script: LuaScript;
  readonly call: CallOf<LuaScript>;
  /** Sends so far, redirects included. */
  readonly attempt: number;
  readonly resolve: (settled: [reply: unknown, replicas: number]) => void;
  readonly reject: (error: unknown) => void;
}

/** The writes bound for one node: those waiting, and the batch in flight. */
interface Lane {
  waiting: Pending[];
  inFlight: object | undefined;
}

/** ioredis' refusal of a pipeline whose keys' slots are, by its map, on different nodes. */
const SPLIT_NODES = "All keys in the pipeline should belong to the same slots allocation group";

/**
 * The writes that replicas must confirm, of every shard on one client: each
 * script is run, then `WAIT` on the same connection, both in one pipeline,
 * which ioredis sends to the one node serving the scripts' keys (a Redis
 * Cluster routes a keyless command of a pipeline with the pipeline's slot),
 * so `WAIT` counts the replicas of the master that ran the scripts.
 *
 * One `WAIT` at a time per node, covering every write sent to it since the
 * last. Why: Redis blocks the connection that sent a `WAIT` until it returns,
 * and ioredis sends everything bound for a node over one connection; when the
 * replicas cannot answer, every `WAIT` lasts its whole timeout (it counts
 * replicas, not writes), so `WAIT`s sent behind one another would queue there
 * until every call outlived the API's deadline, and under steady load never
 * drain. A `WAIT` confirms every write its connection sent before it, so one
 * for the lot confirms each exactly as one each would, and a write waits at
 * most two `WAIT`s (each perhaps a 100 ms cron tick late). The lanes are per
 * node, not per shard, as shards may share a master.
 */
export class ConfirmedWrites {
  readonly #redis: RedisClient;
  readonly #replicas: number;
  readonly #timeoutMs: number;
  readonly #lanes = new Map<string, Lane>();

  constructor(redis: RedisClient, { replicas, timeoutMs }: ConfirmedWritesOptions) {
    this.#redis = redis;
    this.#replicas = replicas;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Runs `script` and, when replicas must confirm it, waits for them
   * (see the class). Resolves with the script's reply and how many replicas
   * acknowledged it (`Infinity` when none were asked for); rejects with the
   * script's error, or with the `WAIT`'s when the script ran but its `WAIT`
   * failed.
   */
  async run<S extends LuaScript>(
    script: S,
    call: CallOf<S>,
  ): Promise<[reply: ReplyOf<S>, replicas: number]> {
    if (this.#replicas === 0) return [await runScript(this.#redis, { script, ...call }), Infinity];
    const settled = await new Promise<[unknown, number]>((resolve, reject) => {
      this.#enter([{ script, call: call as CallOf<LuaScript>, attempt: 1, resolve, reject }]);
    });
    return settled as [ReplyOf<S>, number];
  }

  /**
   * Queues `writes`, in order, in their nodes' lanes (`ahead`: before the
   * writes waiting there, for writes sent again), and sends what can go.
   */
  #enter(writes: readonly Pending[], { ahead = false } = {}): void {
    const touched = new Set<string>();
    for (const write of ahead ? [...writes].reverse() : writes) {
      const node = this.#nodeOf(write);
      let lane = this.#lanes.get(node);
      if (lane === undefined) {
        lane = { waiting: [], inFlight: undefined };
        this.#lanes.set(node, lane);
      }
      if (ahead) lane.waiting.unshift(write);
      else lane.waiting.push(write);
      touched.add(node);
    }
    for (const node of touched) this.#sendWaiting(node);
  }

  /** The node serving the write's first key, by the client's map; one lane for a standalone Redis. */
  #nodeOf({ script, call }: Pending): string {
    if (!(this.#redis instanceof Cluster)) return "";
    const slot = calculateSlot(call.keys[script.keys[0]!]!);
    return this.#redis.slots[slot]?.[0] ?? `slot ${slot}`;
  }

  #sendWaiting(node: string): void {
    const lane = this.#lanes.get(node);
    if (lane === undefined || lane.inFlight !== undefined) return;
    if (lane.waiting.length === 0) {
      this.#lanes.delete(node);
      return;
    }
    const batch = lane.waiting;
    lane.waiting = [];
    const inFlight = {};
    lane.inFlight = inFlight;
    // Also when the stall below released it already: writes it sends again after a redirect
    // are in their lanes by then.
    const release = () => {
      if (lane.inFlight === inFlight) lane.inFlight = undefined;
      this.#sendWaiting(node);
    };
    // Redis answers a WAIT within its timeout: a call in flight twice as long is held up
    // elsewhere (a node that stalls, a client retrying a closed connection), not by replicas,
    // so the writes behind it go anyway rather than wait on it past their own deadline.
    const stalled = setTimeout(release, 2 * this.#timeoutMs);
    // #send never rejects: it settles or requeues every write of the batch itself.
    void this.#send(batch).finally(() => {
      clearTimeout(stalled);
      release();
    });
  }

  async #send(batch: readonly Pending[]): Promise<void> {
    let replies: [Error | null, unknown][];
    try {
      replies = await this.#exec(batch);
    } catch (error) {
      // The client's map put two of the lane's slots on different nodes since the writes
      // entered it (a failover it has half learnt): each slot goes on its own.
      if (error instanceof Error && error.message === SPLIT_NODES && batch.length > 1) {
        const bySlot = Map.groupBy(
          batch,
          ({ script, call }) => calculateSlot(call.keys[script.keys[0]!]!),
        );
        await Promise.all([...bySlot.values()].map((writes) => this.#send(writes)));
        return;
      }
      for (const pending of batch) pending.reject(error);
      return;
    }
    const [waitError, replicas] = replies.at(-1)! as [Error | null, number];
    const redirected: Pending[] = [];
    batch.forEach((pending, i) => {
      const [error, reply] = replies[i]!;
      // The slot moved (a failover that left the old master alive, a
      // resharding): the script did not run. ioredis follows a redirect for a
      // single command, but not for a pipeline whose WAIT succeeded on the old
      // node, and nothing else makes it refresh its slot map while that node
      // lives; so refresh it here and send the write again, ahead of those
      // that came since.
      if (error && REDIRECT.test(error.message) && pending.attempt < MAX_REDIRECTS) {
        redirected.push({ ...pending, attempt: pending.attempt + 1 });
      } else if (error) {
        pending.reject(error);
      } else if (waitError) {
        pending.reject(waitError);
      } else {
        pending.resolve([reply, replicas]);
      }
    });
    if (redirected.length > 0) {
      await refreshSlots(this.#redis);
      this.#enter(redirected, { ahead: true });
    }
  }

  /** The batch's scripts and one `WAIT`, as one pipeline; the replies in that order. */
  async #exec(batch: readonly Pending[]): Promise<[Error | null, unknown][]> {
    const pipeline = this.#redis.pipeline();
    // Only queued: the replies come from exec().
    for (const { script, call } of batch) runScript(pipeline, { script, ...call });
    pipeline.wait(this.#replicas, this.#timeoutMs);
    return (await pipeline.exec()) as [Error | null, unknown][];
  }
}
