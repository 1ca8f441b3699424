/**
 * The consumer loop: take a batch into this consumer's processing list, store
 * it, acknowledge it once its rows are committed — and keep doing so through
 * crashes, outages, poison and shutdown, as `docs/delivery.md#how-the-code-keeps-it`
 * says.
 *
 * It wires the roles: `fetcher.ts` takes batches, `store_step.ts` inserts them
 * and sets poison apart, `acknowledger.ts` acknowledges them in order,
 * `look_ahead.ts` takes the next ones while one is stored, `in_flight.ts`
 * keeps the batches held in order, `membership.ts` the id and heartbeat, and
 * `retrier.ts` retries every call or gives it up at stop. Being fenced
 * travels as a `FencedError` to one place here, which drops what is held and
 * takes a new id. It prints nothing: it reports {@link ConsumerEvent}s and
 * {@link ConsumerMeasurement}s, and `main.ts` decides how they are written.
 *
 * @module
 */

import { FencedError, type FetchedBatch, type ShardedQueue } from "@users-pipeline/queue";
import { Acknowledger } from "./acknowledger.ts";
import { type Clock, systemClock } from "@users-pipeline/runtime/clock";
import type { ConsumerEvent, ConsumerMeasurement, ConsumerStats, Step } from "./consumer_events.ts";
import { Fetcher } from "./fetcher.ts";
import { InFlight } from "./in_flight.ts";
import { LookAhead } from "./look_ahead.ts";
import { Membership } from "./membership.ts";
import { Abandoned, Retrier } from "./retrier.ts";
import { StoreStep } from "./store_step.ts";
import type { UserStore } from "./user_writer.ts";

export type { Step };
export { batchesAhead } from "./look_ahead.ts";

/** What the loop needs; `main.ts` wires the real clients. */
export interface ConsumerOptions {
  /** Fetches and acknowledgements reject with `FencedError` once the consumer is fenced. */
  readonly queue: Pick<
    ShardedQueue,
    "register" | "heartbeat" | "fetch" | "fetchesWithAck" | "recover" | "handBack"
  >;
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

/** Why a fenced consumer takes a new id. */
const FENCED = "its heartbeat expired and its work was recovered by others";

/** One consumer: `consume()` until `stop()`. */
export class Consumer {
  readonly stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  readonly #options: Required<Omit<ConsumerOptions, "onStep">> & Pick<ConsumerOptions, "onStep">;
  readonly #retrier: Retrier;
  readonly #membership: Membership;
  readonly #fetcher: Fetcher;
  readonly #storeStep: StoreStep;
  readonly #acknowledger: Acknowledger;
  readonly #inFlight = new InFlight();
  readonly #lookAhead: LookAhead;
  /** Aborted when the loop has ended, which cancels the deadline's timer. */
  readonly #ended = new AbortController();
  #running: Promise<void> | undefined;

  constructor(options: ConsumerOptions) {
    const settings = { onEvent: () => {}, onMeasurement: () => {}, clock: systemClock, ...options };
    const stats = this.stats;
    this.#options = settings;
    this.#retrier = new Retrier(settings);
    this.#membership = new Membership({ ...settings, retrier: this.#retrier, stats });
    const roles = { ...settings, retrier: this.#retrier, membership: this.#membership, stats };
    this.#fetcher = new Fetcher(roles);
    this.#storeStep = new StoreStep(roles);
    const { fetchesWithAck } = settings.queue;
    this.#acknowledger = new Acknowledger({ ...roles, fetchesWithAck });
    this.#lookAhead = new LookAhead({
      ...settings,
      fetcher: this.#fetcher,
      storeStep: this.#storeStep,
      inFlight: this.#inFlight,
    });
  }

  /** This consumer's current id (its processing list is `<queue>:processing:<id>`). */
  get id(): string {
    return this.#membership.id;
  }

  /** Runs the loop until {@link stop}; a second call returns the same promise. */
  consume(): Promise<void> {
    this.#running ??= this.#loop();
    return this.#running;
  }

  /** Asks the loop to finish the batch in hand and stop; resolves when it has. */
  stop(): Promise<void> {
    if (!this.#retrier.stopping) {
      this.#retrier.stop();
      if (this.#running !== undefined) {
        const { clock, shutdownTimeoutMs } = this.#options;
        void clock.sleep(shutdownTimeoutMs, this.#ended.signal).then(() => {
          if (!this.#ended.signal.aborted) this.#retrier.passDeadline();
        });
      }
    }
    return this.#running ?? Promise.resolve();
  }

  async #loop(): Promise<void> {
    const { onEvent, batchSize, queue } = this.#options;
    let stopTimers = () => {};
    try {
      await this.#membership.register();
      onEvent({ event: "consumer_started", consumer_id: this.id, batch_size: batchSize });
      stopTimers = this.#membership.startTimers();
      await this.#work();
    } catch (error) {
      if (!(error instanceof Abandoned)) throw error;
      if (error.deadline) onEvent({ event: "shutdown_deadline", items: this.#inFlight.items });
    } finally {
      this.#ended.abort();
      stopTimers();
    }
    // Items still held (a batch abandoned at the deadline, or taken by a fetch given up at
    // stop) go back to the front of the queue; what Redis does not take back now is recovered.
    const consumerId = this.id;
    try {
      const items = await this.#retrier.within(queue.handBack(consumerId), {
        ms: HAND_BACK_TIMEOUT_MS,
        what: "hand back the items in hand",
      });
      onEvent({ event: "handed_back", consumer_id: consumerId, items });
    } catch (error) {
      onEvent({ event: "hand_back_failed", consumer_id: consumerId, error });
    }
  }

  /** Take, store, acknowledge, until stopped with nothing taken ahead. */
  async #work(): Promise<void> {
    const { onStep, queue } = this.#options;
    const inFlight = this.#inFlight;
    const lookAhead = this.#lookAhead;
    // A batch already taken ahead is finished even once stopping: it is in hand.
    while (!this.#retrier.stopping || inFlight.ahead !== undefined) {
      try {
        const inHand = inFlight.takeInHand() ?? inFlight.hold(await this.#fetcher.fetch());
        const { batch } = inHand;
        if (batch.items.length === 0) {
          inFlight.release(inHand);
          lookAhead.flowing = false;
          await this.#fetcher.wait();
          continue;
        }
        if (inHand.stored === null) onStep?.("fetched", batch);
        const taken = lookAhead.takeDuring(batch);
        // Awaited below; should this store end the loop first, nothing waits for it.
        taken.catch(() => {});
        const stored = await (inHand.stored ?? this.#storeStep.store(batch));
        await taken;
        inFlight.ackSettled();
        // Every batch taken is held here: a crash at this step leaves the stored
        // batch and the ones fetched during its insert for recovery.
        onStep?.("stored", batch);
        const fetchHeld = inFlight.items - batch.items.length;
        const acked = this.#acknowledger.acknowledge(stored, { fetchHeld });
        lookAhead.flowing = true;
        if (inFlight.ahead !== undefined && !this.#retrier.stopping && queue.fetchesWithAck) {
          // The next batch is in hand: this acknowledgement, carrying the fetch of the batch
          // after those taken ahead, runs during its insert, which awaits it first.
          acked.catch(() => {});
          inFlight.acknowledging(inHand, acked);
          continue;
        }
        const next = await acked;
        inFlight.release(inHand);
        // Nothing was ahead: what the acknowledgement took is next (empty: the loop waits).
        if (next !== undefined) inFlight.putAhead(next);
      } catch (error) {
        if (!(error instanceof FencedError)) throw error;
        // Whatever it held was (or will be) recovered by others, the batches taken ahead too:
        // none may be acknowledged under a new id. A store still running only repeats rows.
        inFlight.clear();
        lookAhead.flowing = false;
        await this.#membership.reregister(FENCED);
      }
    }
  }
}
