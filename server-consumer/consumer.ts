/**
 * The consumer loop: fetch a batch into this consumer's processing list,
 * decode it, store it, acknowledge it — and keep doing so through crashes,
 * outages, poison and shutdown.
 *
 * Delivery contract (see also `queue/redis_queue.ts`):
 * - A batch is acknowledged only after its rows are committed, so every item
 *   taken is either stored, dead-lettered with its reason, or still held in a
 *   processing list from which it is recovered.
 * - Poison (an item that is not a valid envelope, or a row PostgreSQL refuses
 *   for its data) is dead-lettered with the reason and never blocks the loop.
 * - Transient failures (Redis or PostgreSQL down, frozen or restarting) are
 *   retried with capped exponential backoff and jitter, forever while running;
 *   they are never dead-lettered. The outage is reported when it starts and
 *   when it ends.
 * - While one batch is inserted the next is taken (the insert waits on
 *   PostgreSQL, the fetch on Redis, so the two overlap instead of adding up)
 *   once the consumer is in flow: from its second batch after starting, an
 *   idle wait or a fencing on, and while the batch in hand is full (a smaller
 *   one emptied the queue). The first batch after those is fetched alone,
 *   so consumers waking together on a small backlog share it instead of the
 *   first hoarding two batches while the others stay idle. In flow, a
 *   batch's acknowledgement carries the fetch of the batch after the next
 *   and runs during the next one's insert: one script call per batch (per
 *   user in single mode), overlapped. Each fetch says how many items the
 *   consumer will hold besides what it takes, and every call that moves or
 *   trims the processing list is sent only once the previous one has
 *   settled, so each happens in an order the scripts expect; a repeat after
 *   a lost reply takes and trims nothing more. Nothing is fetched alongside
 *   a recovered suspect, so a poison item that crashes the process never
 *   makes new items suspects.
 * - A batch taken during an insert is stored as soon as it arrives, its
 *   insert beside the one in progress (the store's client has two
 *   connections), so decoding it and sending its rows overlap that insert.
 *   Each batch is still acknowledged only after its own commit, and in the
 *   order the batches were taken, which is the order the acknowledgement
 *   trims the processing list in.
 * - When nothing was taken during the insert (the first batch after a
 *   pause, a batch smaller than asked for, or a suspect), the
 *   acknowledgement fetches the next batch in the same call, unless
 *   stopping.
 * - A heartbeat, refreshed on a timer independent of the work, says this
 *   consumer is alive however slow its inserts; each consumer periodically
 *   recovers the items of consumers whose heartbeat expired.
 * - On stop, the loop takes no new batch (a wait or a fetch in progress is
 *   given up at once), finishes what it holds, the batch being stored and the
 *   one taken during its insert (or, at the shutdown deadline, gives up
 *   even a call in progress and hands all it holds back to the front of the queue),
 *   and unregisters. The hand-back itself is bounded
 *   too, so a stop ends within the deadline and {@linkcode HAND_BACK_TIMEOUT_MS}
 *   even while Redis or PostgreSQL is down or frozen: what is not handed back
 *   stays in the processing list and is recovered once the heartbeat expires.
 * - A batch counts in {@link ConsumerStats} once, when its acknowledgement is
 *   accepted: a fenced consumer's batch is redelivered and counted by whoever
 *   acknowledges it.
 *
 * The loop prints nothing: it reports what happens as {@link ConsumerEvent}s,
 * and `main.ts` decides how they are written; what it measures for the
 * metrics (batch sizes, insert times, latencies, failed calls) it reports as
 * {@link ConsumerMeasurement}s.
 *
 * @module
 */

import { DeadlineError } from "@users-pipeline/runtime/deadline";
import {
  type Batch,
  type DeadLetter,
  type DeadLetterKind,
  decodeEnvelope,
  PoisonMessageError,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { backoffDelay, type Dependency, Outage, type OutageEvent } from "./backoff.ts";
import { type Clock, systemClock } from "./clock.ts";
import { type UserStore, writeUsers } from "./user_writer.ts";

/** The queue operations the loop uses; `RedisQueue` provides them. */
export interface ConsumerQueue {
  register(consumerId: string, ttlMs: number): Promise<void>;
  heartbeat(consumerId: string, ttlMs: number): Promise<boolean>;
  /** `held`: items the consumer holds unacknowledged (see `queue/scripts.ts`, FETCH). */
  fetch(consumerId: string, max: number, held: number): Promise<Batch | undefined>;
  /** `storedIds` are the ids of the rows just committed (they leave the status index). */
  ack(
    consumerId: string,
    batch: Batch,
    deadLetters: readonly DeadLetter[],
    storedIds: readonly string[],
  ): Promise<boolean>;
  /**
   * `ack`, and in the same call the next batch for a consumer holding
   * nothing else: `undefined` when fenced (nothing acknowledged), null when
   * acknowledged but the queue fetches separately (several shards).
   */
  ackAndFetch(
    consumerId: string,
    batch: Batch,
    deadLetters: readonly DeadLetter[],
    storedIds: readonly string[],
    max: number,
    held: number,
  ): Promise<Batch | undefined | null>;
  /** True when {@linkcode ackAndFetch} fetches (false: it only acknowledges, and returns null). */
  readonly fetchesWithAck: boolean;
  recover(maxCrashes: number): Promise<{ recovered: number; buried: number; consumers: number }>;
  handBack(consumerId: string): Promise<number>;
}

/** A point of the loop, reported to {@link ConsumerOptions.onStep} (fault tests crash there). */
export type Step = "fetched" | "stored";

/**
 * What the loop reports. `event` is the name written to the log and the
 * other fields are written beside it, so they are spelled as in the log.
 */
export type ConsumerEvent =
  /** Registered: from now on the consumer takes work (its readiness). */
  | {
    readonly event: "consumer_started";
    readonly consumer_id: string;
    readonly batch_size: number;
  }
  /** Declared dead by others while alive; carries on under a new id. */
  | {
    readonly event: "consumer_fenced";
    readonly consumer_id: string;
    readonly new_consumer_id: string;
    readonly reason: string;
  }
  | OutageEvent
  /** Work taken back from consumers whose heartbeat expired. */
  | {
    readonly event: "recovered";
    readonly items: number;
    readonly buried: number;
    readonly consumers: number;
  }
  /** One item buried with its reason (and PostgreSQL's SQLSTATE if it refused the row). */
  | { readonly event: "dead_lettered"; readonly reason: string; readonly sqlstate?: string }
  /** Stopping took longer than allowed while retrying; `items` were still in hand. */
  | { readonly event: "shutdown_deadline"; readonly items: number }
  /** Unregistered, returning `items` unfinished items to the front of the queue. */
  | { readonly event: "handed_back"; readonly consumer_id: string; readonly items: number }
  /** Could not unregister; whatever it held is recovered once its heartbeat expires. */
  | { readonly event: "hand_back_failed"; readonly consumer_id: string; readonly error: unknown };

/**
 * What the loop measures, for the metrics (`metrics.ts`): more often, and in
 * more detail, than is worth a log record.
 */
export type ConsumerMeasurement =
  /** A batch acknowledged (a fenced consumer's batch is measured by whoever acknowledges it). */
  | {
    readonly type: "batch_acked";
    /** Items the batch held, poison included. */
    readonly items: number;
    /** True for an item recovered from a crashed consumer. */
    readonly fromRetry: boolean;
    /** Rows stored (including redeliveries of rows already there). */
    readonly stored: number;
    /** The kind of each item buried. */
    readonly deadLetters: readonly DeadLetterKind[];
    /** How long the successful insert took; undefined when nothing was to insert. */
    readonly insertSeconds: number | undefined;
    /** For each row stored, the seconds from the API's enqueue to the commit. */
    readonly latenciesSeconds: readonly number[];
  }
  /** A call to Redis or PostgreSQL that failed and will be retried (each one, not an outage's first). */
  | { readonly type: "call_failed"; readonly dependency: Dependency; readonly error: unknown };

/** What the loop needs; `main.ts` wires the real clients. */
export interface ConsumerOptions {
  readonly queue: ConsumerQueue;
  /** Blocks until the queue may have items or the timeout passes (a dedicated connection). */
  readonly waitForItems: (timeoutSeconds: number) => Promise<unknown>;
  readonly store: UserStore;
  /** Most items per batch (1 in single mode). */
  readonly batchSize: number;
  readonly heartbeatTtlMs: number;
  readonly recoveryIntervalMs: number;
  readonly maxCrashes: number;
  readonly blockTimeoutSeconds: number;
  readonly retryMaxDelayMs: number;
  readonly shutdownTimeoutMs: number;
  /** Mints a consumer id (a new one after being fenced). */
  readonly newId: () => string;
  /** Receives everything worth logging. @default ignores them */
  readonly onEvent?: (event: ConsumerEvent) => void;
  /** Receives the measurements behind the metrics. @default ignores them */
  readonly onMeasurement?: (measurement: ConsumerMeasurement) => void;
  /** Time, pauses and timers. @default systemClock */
  readonly clock?: Clock;
  readonly onStep?: (step: Step, batch: Batch) => void;
}

/** Running totals, for logs, tests and benchmarks. */
export interface ConsumerStats {
  /** Rows acknowledged as stored (including redeliveries of rows already there). */
  stored: number;
  deadLettered: number;
  batches: number;
  recovered: number;
}

/**
 * How long the hand-back may take once the loop has ended: a script on a live
 * Redis takes milliseconds, so 2 s tells a frozen one apart, and a stop stays
 * within SHUTDOWN_TIMEOUT_MS and a few seconds, inside compose's grace period.
 */
export const HAND_BACK_TIMEOUT_MS = 2_000;

/** Raised inside the loop when a call is given up because the consumer is stopping. */
class Abandoned extends Error {
  /** True when the shutdown deadline passed with work in hand; false when nothing was in hand. */
  readonly deadline: boolean;

  constructor(deadline: boolean) {
    super(deadline ? "the shutdown deadline passed" : "the consumer is stopping");
    this.deadline = deadline;
  }
}

/** `work`, unless `signal` aborts first: then {@linkcode Abandoned}. */
async function unlessAborted<T>(
  work: Promise<T>,
  signal: AbortSignal,
  deadline: boolean,
): Promise<T> {
  let onAbort = () => {};
  const abandoned = new Promise<never>((_, reject) => {
    onAbort = () => reject(new Abandoned(deadline));
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([work, abandoned]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/** A batch stored and not yet acknowledged: what its acknowledgement needs and reports. */
interface StoredBatch {
  readonly batch: Batch;
  readonly deadLetters: readonly DeadLetter[];
  /** The ids of the rows committed (they leave the status index). */
  readonly storedIds: readonly string[];
  readonly insertSeconds: number | undefined;
  readonly latenciesSeconds: readonly number[];
}

/** One consumer: `run()` until `stop()`. */
export class Consumer {
  readonly stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  readonly #o: Required<Omit<ConsumerOptions, "onStep">> & Pick<ConsumerOptions, "onStep">;
  readonly #redis: Outage;
  readonly #postgres: Outage;
  #id: string;
  #inHand: Batch | undefined;
  /** The batch after the one in hand, already in the processing list; null when none is. */
  #next: Batch | undefined | null = null;
  /**
   * The store of {@linkcode #next}, started as soon as it was fetched, while
   * the batch in hand was still being inserted; null when it was not.
   */
  #nextStored: Promise<StoredBatch> | null = null;
  /**
   * The acknowledgement of the batch stored last (`items` long), still in
   * flight while the next is stored; it resolves to the batch after that
   * one, fetched with it.
   */
  #acking: { readonly items: number; readonly next: Promise<Batch | null | undefined> } | null =
    null;
  /** True once a batch was acknowledged with no idle wait or fencing since (see the module doc). */
  #flowing = false;
  /** Aborted by {@linkcode stop}: calls made while idle are given up. */
  readonly #stopped = new AbortController();
  /** Aborted SHUTDOWN_TIMEOUT_MS after {@linkcode stop}: every call is given up. */
  readonly #deadline = new AbortController();
  /** Aborted when the loop has ended, which cancels the deadline's timer. */
  readonly #ended = new AbortController();
  #running: Promise<void> | undefined;
  #stopTimers: (() => void)[] = [];

  constructor(options: ConsumerOptions) {
    this.#o = { onEvent: () => {}, onMeasurement: () => {}, clock: systemClock, ...options };
    const outage = { onEvent: this.#o.onEvent, now: () => this.#o.clock.now() };
    this.#redis = new Outage("redis", outage);
    this.#postgres = new Outage("postgres", outage);
    this.#id = options.newId();
  }

  /** This consumer's current id (its processing list is `<queue>:processing:<id>`). */
  get id(): string {
    return this.#id;
  }

  /** Runs the loop until {@link stop}; a second call returns the same promise. */
  run(): Promise<void> {
    this.#running ??= this.#loop();
    return this.#running;
  }

  /** Asks the loop to finish the batch in hand and stop; resolves when it has. */
  stop(): Promise<void> {
    if (!this.#stopping) {
      this.#stopped.abort();
      if (this.#running !== undefined) {
        const { clock, shutdownTimeoutMs } = this.#o;
        void clock.sleep(shutdownTimeoutMs, this.#ended.signal).then(() => {
          if (!this.#ended.signal.aborted) this.#deadline.abort();
        });
      }
    }
    return this.#running ?? Promise.resolve();
  }

  get #stopping(): boolean {
    return this.#stopped.signal.aborted;
  }

  async #loop(): Promise<void> {
    const o = this.#o;
    try {
      await this.#retry(this.#redis, () => o.queue.register(this.#id, o.heartbeatTtlMs));
      o.onEvent({ event: "consumer_started", consumer_id: this.#id, batch_size: o.batchSize });
      this.#startTimers();
      // A batch fetched while the previous one was being stored; null when none was.
      // A batch already fetched is finished even once stopping: it is in hand.
      while (!this.#stopping || this.#next) {
        let batch: Batch | undefined;
        let storing: Promise<StoredBatch> | null = null;
        if (this.#next !== null) {
          batch = this.#next;
          this.#next = null;
          storing = this.#nextStored;
          this.#nextStored = null;
        } else {
          batch = await this.#retry(this.#redis, () => o.queue.fetch(this.#id, o.batchSize, 0));
        }
        if (batch === undefined) {
          this.#flowing = false;
          await this.#reregister("its heartbeat expired and its work was recovered by others");
          continue;
        }
        if (batch.items.length === 0) {
          this.#flowing = false;
          await this.#retry(this.#redis, () => this.#wait());
          continue;
        }
        this.#inHand = batch;
        if (storing === null) o.onStep?.("fetched", batch);
        // The batch after this one is taken while this one is stored: by the
        // previous batch's acknowledgement, when it is still in flight, or by
        // an early fetch. A batch smaller than asked for emptied the queue, so
        // an early fetch would most likely come back empty: none then.
        const acking = this.#acking?.next ?? null;
        const fetchEarly = acking === null && this.#flowing && !batch.fromRetry &&
          batch.items.length === o.batchSize;
        const early = acking ?? (fetchEarly ? this.#fetchEarly(batch) : Promise.resolve(null));
        // The batch taken during this insert is stored as soon as it arrives,
        // beside this one (the store's client has two connections): decoding
        // it and sending its rows overlap this insert instead of following
        // it. Each batch is still acknowledged only after its own commit, in
        // the order they were taken.
        const ahead = early.then((after) => {
          if (after && after.items.length > 0) this.#storeAhead(after);
          return after;
        });
        // Awaited below; should this store end the loop first, nothing waits for it.
        ahead.catch(() => {});
        storing ??= this.#store(batch);
        const stored = await storing;
        const after = await ahead;
        this.#acking = null;
        if (after === undefined) {
          this.#inHand = undefined;
          // Fenced: whatever we hold was (or will be) recovered by others, this
          // batch and the one taken during its insert too; neither may be
          // acknowledged under a new id. (A refused acknowledgement re-registered already.)
          this.#flowing = false;
          if (acking === null) {
            await this.#reregister("its heartbeat expired and its work was recovered by others");
          }
          continue;
        }
        // Both batches are held here: a crash at this step leaves the stored batch
        // and the one fetched during its insert for recovery.
        o.onStep?.("stored", batch);
        if (after !== null && after.items.length > 0) {
          // The next batch is in hand: it is stored next, even when stopping.
          this.#next = after;
          if (!this.#stopping && o.queue.fetchesWithAck) {
            // This batch's acknowledgement, carrying the fetch of the batch
            // after the next, runs during the next insert; that iteration
            // awaits it before acknowledging anything itself.
            const next = this.#acknowledge(stored, after.items.length);
            // Awaited there; the Abandoned it may end with ends the loop there too.
            next.catch(() => {});
            this.#acking = { items: batch.items.length, next };
            this.#inHand = undefined;
            this.#flowing = true;
            continue;
          }
          const acked = await this.#acknowledge(stored, undefined);
          this.#inHand = undefined;
          if (acked === undefined) {
            // Fenced: the next batch is recovered by others; its store, if it
            // is still running, only repeats rows the insert skips.
            this.#next = null;
            this.#nextStored = null;
          }
          this.#flowing = acked !== undefined;
          continue;
        }
        // Nothing in hand after this batch (none fetched early, or the queue
        // ran dry, or recovered items wait, which only a fetch holding nothing
        // may take): the acknowledgement fetches what comes next.
        const next = await this.#acknowledge(stored, 0);
        this.#inHand = undefined;
        this.#flowing = next !== undefined;
        // Empty: the queue is empty, and the loop waits for items.
        if (next) this.#next = next;
      }
    } catch (error) {
      if (!(error instanceof Abandoned)) throw error;
      if (error.deadline) {
        const held = (this.#acking?.items ?? 0) + (this.#inHand?.items.length ?? 0) +
          (this.#next?.items.length ?? 0);
        o.onEvent({ event: "shutdown_deadline", items: held });
      }
    } finally {
      this.#ended.abort();
      for (const stop of this.#stopTimers) stop();
    }
    // Items still held (a batch abandoned at the deadline, or taken by a fetch
    // given up at stop) go back to the front of the queue; if Redis is
    // unreachable now, the heartbeat expires and another consumer recovers them
    // instead. Nothing is lost either way.
    try {
      const items = await this.#within(
        o.queue.handBack(this.#id),
        HAND_BACK_TIMEOUT_MS,
        "hand back the items in hand",
      );
      o.onEvent({ event: "handed_back", consumer_id: this.#id, items });
    } catch (error) {
      o.onEvent({ event: "hand_back_failed", consumer_id: this.#id, error });
    }
  }

  /**
   * `work`, or a {@linkcode DeadlineError} (`Cannot <what>: …`) once `ms`
   * passed on the loop's clock: `runtime/deadline.ts`'s bound, on the clock the
   * tests step.
   */
  async #within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
    const settled = new AbortController();
    const late = this.#o.clock.sleep(ms, settled.signal).then(() => {
      if (!settled.signal.aborted) {
        throw new DeadlineError(`Cannot ${what}: no answer within ${ms} ms`, ms);
      }
    });
    try {
      // `late` rejects or, once `work` settled, resolves to `work` itself.
      return await Promise.race([work, late.then(() => work)]);
    } finally {
      settled.abort();
    }
  }

  /**
   * Starts storing `next`, the batch taken while the one in hand is inserted
   * (it is "fetched" for the fault tests from now on); the loop awaits the
   * store once `next` is in hand, so a failure here surfaces there.
   */
  #storeAhead(next: Batch): void {
    this.#o.onStep?.("fetched", next);
    const storing = this.#store(next);
    storing.catch(() => {});
    this.#nextStored = storing;
  }

  /**
   * Fetches the batch after `inHand` while `inHand` is stored. Never rejects:
   * null when the consumer is stopping (what a fetch given up mid-call took
   * stays in the processing list and is handed back with the rest).
   */
  async #fetchEarly(inHand: Batch): Promise<Batch | undefined | null> {
    if (this.#stopping) return null;
    const o = this.#o;
    try {
      return await this.#retry(
        this.#redis,
        () => o.queue.fetch(this.#id, o.batchSize, inHand.items.length),
      );
    } catch (error) {
      if (error instanceof Abandoned) return null;
      throw error;
    }
  }

  async #wait(): Promise<void> {
    const o = this.#o;
    // The wait bounds itself client-side as well, in case a reconnect leaves the
    // blocking call hanging (see `server-consumer/blocking_wait.ts`); a wait that fails
    // that way is retried like any other call.
    await o.waitForItems(o.blockTimeoutSeconds);
  }

  /**
   * Decodes and stores `batch`: what is left to acknowledge. Invalid items
   * and rows PostgreSQL refuses become dead letters; transient failures are
   * retried until the shutdown deadline.
   */
  async #store(batch: Batch): Promise<StoredBatch> {
    const o = this.#o;
    const deadLetters: DeadLetter[] = [];
    const users: UserEnvelope[] = [];
    const payloads: string[] = [];
    const storedIds: string[] = [];
    const now = new Date(o.clock.now()).toISOString();
    for (const payload of batch.items) {
      try {
        users.push(decodeEnvelope(payload));
        payloads.push(payload);
      } catch (error) {
        if (!(error instanceof PoisonMessageError)) throw error;
        deadLetters.push({ payload, reason: error.message, kind: "invalid_item", dead_at: now });
      }
    }
    let insertStarted = 0;
    let committedAt = 0;
    let insertSeconds: number | undefined;
    let latenciesSeconds: number[] = [];
    if (users.length > 0) {
      const rejected = await this.#retry(
        this.#postgres,
        () => {
          insertStarted = o.clock.now();
          return writeUsers(o.store, users);
        },
        { finishing: true },
      );
      committedAt = o.clock.now();
      insertSeconds = (committedAt - insertStarted) / 1_000;
      const refused = new Set<number>();
      for (const { index, reason, sqlstate } of rejected) {
        refused.add(index);
        deadLetters.push({
          payload: payloads[index]!,
          reason,
          // Only the database's data errors carry a SQLSTATE; the writer's other rejects are ids
          // already stored under another name.
          kind: sqlstate === undefined ? "id_conflict" : "database_refused",
          id: users[index]!.id,
          sqlstate,
          dead_at: now,
        });
      }
      const committed = users.filter((_, i) => !refused.has(i));
      storedIds.push(...committed.map((user) => user.id));
      latenciesSeconds = committed.map(({ enqueued_at }) => (committedAt - enqueued_at) / 1_000);
    }
    return { batch, deadLetters, storedIds, insertSeconds, latenciesSeconds };
  }

  /**
   * Acknowledges a stored batch and counts it; resolves `undefined` when the
   * consumer was fenced (it has re-registered). With `fetchHeld` (how many
   * items the consumer will still hold: the batch fetched during this one's
   * insert, or 0) and unless stopping, the acknowledgement also fetches the
   * next batch, which it resolves to; null when nothing was fetched (no
   * `fetchHeld`, stopping, or a queue that fetches separately).
   */
  async #acknowledge(
    { batch, deadLetters, storedIds, insertSeconds, latenciesSeconds }: StoredBatch,
    fetchHeld: number | undefined,
  ): Promise<Batch | null | undefined> {
    const o = this.#o;
    const next = await this.#retry(
      this.#redis,
      // Decided at each attempt: once stopping, the loop takes no new batch.
      () =>
        fetchHeld !== undefined && !this.#stopping
          ? o.queue.ackAndFetch(this.#id, batch, deadLetters, storedIds, o.batchSize, fetchHeld)
          : o.queue.ack(this.#id, batch, deadLetters, storedIds).then((acked) =>
            acked ? null : undefined
          ),
      { finishing: true },
    );
    if (next === undefined) {
      // Our items were recovered while we worked; they will be redelivered and
      // the idempotent insert absorbs the repeat. They are counted (and their
      // dead letters buried) by whoever acknowledges them, so not here.
      await this.#reregister("it was presumed dead while storing a batch");
      return undefined;
    }
    this.stats.batches++;
    this.stats.stored += storedIds.length;
    this.stats.deadLettered += deadLetters.length;
    o.onMeasurement({
      type: "batch_acked",
      items: batch.items.length,
      fromRetry: batch.fromRetry,
      stored: storedIds.length,
      deadLetters: deadLetters.map(({ kind }) => kind),
      insertSeconds,
      latenciesSeconds,
    });
    for (const { reason, sqlstate } of deadLetters) {
      o.onEvent(
        sqlstate === undefined
          ? { event: "dead_lettered", reason }
          : { event: "dead_lettered", reason, sqlstate },
      );
    }
    return next;
  }

  async #reregister(reason: string): Promise<void> {
    const old = this.#id;
    this.#id = this.#o.newId();
    this.#o.onEvent({
      event: "consumer_fenced",
      consumer_id: old,
      new_consumer_id: this.#id,
      reason,
    });
    await this.#retry(this.#redis, () => this.#o.queue.register(this.#id, this.#o.heartbeatTtlMs));
  }

  #startTimers(): void {
    const o = this.#o;
    const heartbeat = async () => {
      try {
        await o.queue.heartbeat(this.#id, o.heartbeatTtlMs);
      } catch {
        // The fetch loop reports Redis outages; a missed beat only matters if
        // it lasts a whole TTL, and then recovery is the right outcome.
      }
    };
    const recover = async () => {
      try {
        const { recovered, buried, consumers } = await o.queue.recover(o.maxCrashes);
        if (consumers > 0) {
          this.stats.recovered += recovered;
          o.onEvent({ event: "recovered", items: recovered, buried, consumers });
        }
      } catch {
        // Same as above: retried on the next tick.
      }
    };
    this.#stopTimers.push(
      o.clock.every(Math.max(100, Math.floor(o.heartbeatTtlMs / 3)), heartbeat),
      o.clock.every(o.recoveryIntervalMs, recover),
    );
    void recover();
  }

  /**
   * Runs `work` until it succeeds. Errors are treated as transient (data
   * errors never reach here: the writer turns them into rejects). Once
   * stopping, a call made while idle is given up at once, even mid-attempt;
   * one `finishing` the batch in hand is retried until the shutdown deadline,
   * then given up too, even mid-attempt.
   */
  async #retry<T>(
    outage: Outage,
    work: () => Promise<T>,
    { finishing = false }: { finishing?: boolean } = {},
  ): Promise<T> {
    const { clock, retryMaxDelayMs } = this.#o;
    const giveUp = finishing ? this.#deadline.signal : this.#stopped.signal;
    for (;;) {
      if (giveUp.aborted) throw new Abandoned(finishing);
      try {
        const result = await unlessAborted(work(), giveUp, finishing);
        outage.succeeded();
        return result;
      } catch (error) {
        if (error instanceof Abandoned) throw error;
        outage.failed(error);
        this.#o.onMeasurement({
          type: "call_failed",
          dependency: outage === this.#postgres ? "postgres" : "redis",
          error,
        });
        await clock.sleep(backoffDelay(outage.failures - 1, { maxMs: retryMaxDelayMs }), giveUp);
      }
    }
  }
}
