/**
 * The consumer loop: fetch a batch into this consumer's processing list,
 * store it, acknowledge it once its rows are committed — and keep doing so
 * through crashes, outages, poison and shutdown, as
 * `docs/delivery.md#how-the-code-keeps-it` says. While one batch is inserted
 * the next is taken and its insert started beside it, so the waits on Redis
 * and on PostgreSQL overlap instead of adding up; each batch is still
 * acknowledged after its own commit, in the order taken.
 *
 * It wires the roles: `fetcher.ts` takes batches, `store_step.ts` inserts them
 * and sets poison apart, `acknowledger.ts` acknowledges them in order and
 * carries the next fetch, `in_flight.ts` keeps the batches held in order,
 * `membership.ts` the id and heartbeat, and `retrier.ts` retries every call or
 * gives it up at stop. It prints nothing: it reports {@link ConsumerEvent}s
 * and {@link ConsumerMeasurement}s, and `main.ts` decides how they are written.
 *
 * @module
 */

import type { FetchedBatch, FetchOptions } from "@users-pipeline/queue";
import { type Acked, Acknowledger } from "./acknowledger.ts";
import { type Clock, systemClock } from "@users-pipeline/runtime/clock";
import type { ConsumerEvent, ConsumerMeasurement, ConsumerStats, Step } from "./consumer_events.ts";
import { Fetcher } from "./fetcher.ts";
import { InFlight } from "./in_flight.ts";
import { Membership } from "./membership.ts";
import { Abandoned, Retrier } from "./retrier.ts";
import { StoreStep } from "./store_step.ts";
import type { UserStore } from "./user_writer.ts";

export type { ConsumerEvent, ConsumerMeasurement, ConsumerStats, Step };

/**
 * The queue operations the loop uses; `ShardedQueue` provides them. Fetches
 * and acknowledgements reject with `FencedError` once the consumer is fenced.
 */
export interface ConsumerQueue {
  register(consumerId: string, ttlMs: number): Promise<void>;
  heartbeat(consumerId: string, ttlMs: number): Promise<void>;
  /** `held`: items the consumer holds unacknowledged (see `queue/lua/fetch.lua`). */
  fetch(options: FetchOptions): Promise<FetchedBatch>;
  /** True when a batch's `ackAndFetch` fetches in the acknowledgement's script call. */
  readonly fetchesWithAck: boolean;
  recover(maxCrashes: number): Promise<{ recovered: number; buried: number; consumers: number }>;
  handBack(consumerId: string): Promise<number>;
}

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
  readonly onStep?: (step: Step, batch: FetchedBatch) => void;
}

/**
 * How long the hand-back may take once the loop has ended: a script on a live
 * Redis takes milliseconds, so 2 s tells a frozen one apart, and a stop stays
 * within SHUTDOWN_TIMEOUT_MS and a few seconds, inside compose's grace period.
 */
export const HAND_BACK_TIMEOUT_MS = 2_000;

/**
 * Batches held beside the one in hand while in flow, for batches of
 * `batchSize` items. Two for batches of many: when an insert commits, the
 * rows of the batch after the next are already decoded and sent behind it on
 * the freed connection while the acknowledgement fetches another; with one,
 * each freed connection waits for that acknowledgement's round trip to Redis
 * and the decoding of what it took. One in single mode: a one-row insert
 * takes no longer than that round trip, so an item more in flight only adds
 * work per item.
 */
export function batchesAhead(batchSize: number): number {
  return batchSize > 1 ? 2 : 1;
}

/** Why a consumer whose fetch found it fenced takes a new id. */
const FENCED = "its heartbeat expired and its work was recovered by others";

/** One consumer: `run()` until `stop()`. */
export class Consumer {
  readonly stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  readonly #o: Required<Omit<ConsumerOptions, "onStep">> & Pick<ConsumerOptions, "onStep">;
  readonly #retrier: Retrier;
  readonly #membership: Membership;
  readonly #fetcher: Fetcher;
  readonly #storeStep: StoreStep;
  readonly #acknowledger: Acknowledger;
  readonly #inFlight = new InFlight();
  /** Aborted when the loop has ended, which cancels the deadline's timer. */
  readonly #ended = new AbortController();
  #running: Promise<void> | undefined;

  constructor(options: ConsumerOptions) {
    const o = { onEvent: () => {}, onMeasurement: () => {}, clock: systemClock, ...options };
    const stats = this.stats;
    this.#o = o;
    this.#retrier = new Retrier(o);
    this.#membership = new Membership({ ...o, retrier: this.#retrier, stats });
    const roles = { ...o, retrier: this.#retrier, membership: this.#membership, stats };
    this.#fetcher = new Fetcher(roles);
    this.#storeStep = new StoreStep(roles);
    this.#acknowledger = new Acknowledger({ ...roles, fetchesWithAck: o.queue.fetchesWithAck });
  }

  /** This consumer's current id (its processing list is `<queue>:processing:<id>`). */
  get id(): string {
    return this.#membership.id;
  }

  /** Runs the loop until {@link stop}; a second call returns the same promise. */
  run(): Promise<void> {
    this.#running ??= this.#loop();
    return this.#running;
  }

  /** Asks the loop to finish the batch in hand and stop; resolves when it has. */
  stop(): Promise<void> {
    if (!this.#retrier.stopping) {
      this.#retrier.stop();
      if (this.#running !== undefined) {
        const { clock, shutdownTimeoutMs } = this.#o;
        void clock.sleep(shutdownTimeoutMs, this.#ended.signal).then(() => {
          if (!this.#ended.signal.aborted) this.#retrier.passDeadline();
        });
      }
    }
    return this.#running ?? Promise.resolve();
  }

  async #loop(): Promise<void> {
    const o = this.#o;
    let stopTimers = () => {};
    try {
      await this.#membership.register();
      o.onEvent({ event: "consumer_started", consumer_id: this.id, batch_size: o.batchSize });
      stopTimers = this.#membership.startTimers();
      await this.#work();
    } catch (error) {
      if (!(error instanceof Abandoned)) throw error;
      if (error.deadline) o.onEvent({ event: "shutdown_deadline", items: this.#inFlight.items });
    } finally {
      this.#ended.abort();
      stopTimers();
    }
    // Items still held (a batch abandoned at the deadline, or taken by a fetch given up at
    // stop) go back to the front of the queue; what Redis does not take back now is recovered.
    const consumerId = this.id;
    try {
      const items = await this.#retrier.within(o.queue.handBack(consumerId), {
        ms: HAND_BACK_TIMEOUT_MS,
        what: "hand back the items in hand",
      });
      o.onEvent({ event: "handed_back", consumer_id: consumerId, items });
    } catch (error) {
      o.onEvent({ event: "hand_back_failed", consumer_id: consumerId, error });
    }
  }

  /** Fetch, store, acknowledge, until stopped with nothing taken ahead. */
  async #work(): Promise<void> {
    const o = this.#o;
    const inFlight = this.#inFlight;
    /**
     * True once a batch was acknowledged with no idle wait or fencing since: only then is a batch
     * taken ahead. The first after a pause is fetched alone, so consumers waking together on a
     * small backlog share it instead of the first taking two batches while the others idle.
     */
    let flowing = false;
    // A batch already taken ahead is finished even once stopping: it is in hand.
    while (!this.#retrier.stopping || inFlight.ahead !== undefined) {
      const ahead = inFlight.ahead;
      const batch = ahead?.batch ?? await this.#fetcher.fetch();
      if (batch === "fenced") {
        flowing = false;
        await this.#membership.reregister(FENCED);
        continue;
      }
      if (batch.items.length === 0) {
        if (ahead !== undefined) inFlight.release(ahead);
        flowing = false;
        await this.#fetcher.wait();
        continue;
      }
      const inHand = inFlight.takeInHand(batch)!;
      if (inHand.stored === null) o.onStep?.("fetched", batch);
      // The batch after this one is taken while this one is stored: by the
      // previous batch's acknowledgement, when it is still in flight, or by
      // an early fetch. A batch smaller than asked for emptied the queue, so
      // an early fetch would most likely come back empty: none then; none
      // beside a recovered suspect either, which is held alone.
      const acking = inFlight.acking;
      const fetchEarly = acking === undefined && flowing && !batch.fromRetry &&
        batch.items.length === o.batchSize;
      // Set when a fetch, not an acknowledgement, found the consumer fenced:
      // only an acknowledgement re-registers by itself.
      let fetchFenced = false;
      // The batches taken during this insert are stored as soon as they
      // arrive, beside this one (the store's client has two connections).
      const taken: Promise<Acked | "none"> = acking !== undefined
        ? acking.then((after) => this.#takeAhead(after, () => fetchFenced = true))
        : fetchEarly
        ? this.#fetcher.fetchEarly(batch).then((after) => {
          if (after === "fenced") fetchFenced = true;
          else if (after !== "none" && after.items.length > 0) this.#storeAhead(after);
          return after;
        })
        : Promise.resolve("none" as const);
      // Awaited below; should this store end the loop first, nothing waits for it.
      taken.catch(() => {});
      const stored = await (inHand.stored ?? this.#storeStep.store(batch));
      const after = await taken;
      inFlight.ackSettled();
      if (after === "fenced") {
        // Fenced: whatever we hold was (or will be) recovered by others, this
        // batch and the ones taken during its insert too; none may be
        // acknowledged under a new id. (A refused acknowledgement re-registered already.)
        inFlight.clear();
        flowing = false;
        if (fetchFenced) await this.#membership.reregister(FENCED);
        continue;
      }
      // Every batch taken is held here: a crash at this step leaves the stored
      // batch and the ones fetched during its insert for recovery.
      o.onStep?.("stored", batch);
      if (inFlight.ahead !== undefined) {
        // The next batch is in hand (taken ahead): it is stored next, even when stopping.
        if (!this.#retrier.stopping && o.queue.fetchesWithAck) {
          // This batch's acknowledgement, carrying the fetch of a batch after
          // those taken ahead, runs during the next insert; that iteration
          // awaits it before acknowledging anything itself.
          const fetchHeld = inFlight.items - batch.items.length;
          const acked = this.#acknowledger.acknowledge(stored, { fetchHeld });
          // Awaited there; the Abandoned it may end with ends the loop there too.
          acked.catch(() => {});
          inFlight.acknowledging(inHand, acked);
          flowing = true;
          continue;
        }
        const acked = await this.#acknowledger.acknowledge(stored);
        // Fenced: the next batch is recovered by others; its store, if it is
        // still running, only repeats rows the insert skips.
        if (acked === "fenced") inFlight.clear();
        else inFlight.release(inHand);
        flowing = acked !== "fenced";
        continue;
      }
      // Nothing in hand after this batch (none fetched early, or the queue
      // ran dry, or recovered items wait, which only a fetch holding nothing
      // may take): the acknowledgement fetches what comes next.
      const next = await this.#acknowledger.acknowledge(stored, { fetchHeld: 0 });
      inFlight.release(inHand);
      flowing = next !== "fenced";
      // Empty: the queue is empty, and the loop waits for items.
      if (typeof next === "object") inFlight.putAhead(next);
    }
  }

  /**
   * What an acknowledgement carried while the batch in hand was stored: the
   * batch it fetched is stored at once, and while the consumer is in flow
   * and the queue full, one more batch is fetched (once the acknowledgement
   * has settled, so the calls on the processing list stay in order) until
   * {@linkcode batchesAhead} are held beside the one in hand.
   */
  async #takeAhead(after: Acked, onFetchFenced: () => void): Promise<Acked> {
    if (typeof after !== "object" || after.items.length === 0) return after;
    this.#storeAhead(after);
    const inFlight = this.#inFlight;
    const { batchSize } = this.#o;
    if (after.items.length < batchSize || inFlight.aheadCount >= batchesAhead(batchSize)) {
      return after;
    }
    inFlight.ackSettled();
    const more = await this.#fetcher.fetchEarly(after, { held: inFlight.items });
    if (more === "fenced") {
      onFetchFenced();
      return more;
    }
    if (more !== "none" && more.items.length > 0) this.#storeAhead(more);
    return after;
  }

  /**
   * Starts storing `next`, the batch taken while the one in hand is inserted
   * (it is "fetched" for the fault tests from now on); the loop awaits the
   * store once `next` is in hand, so a failure here surfaces there.
   */
  #storeAhead(next: FetchedBatch): void {
    this.#o.onStep?.("fetched", next);
    const stored = this.#storeStep.store(next);
    stored.catch(() => {});
    this.#inFlight.putAhead(next, stored);
  }
}
