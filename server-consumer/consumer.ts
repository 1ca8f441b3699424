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
 *   they are never dead-lettered. The outage is logged when it starts and ends.
 * - A heartbeat, refreshed on a timer independent of the work, says this
 *   consumer is alive however slow its inserts; each consumer periodically
 *   recovers the items of consumers whose heartbeat expired.
 * - On stop, the loop takes no new batch, finishes the batch in hand (or, past
 *   the shutdown deadline, hands it back to the front of the queue), and
 *   unregisters.
 *
 * @module
 */

import { decodeEnvelope, PoisonMessageError, type UserEnvelope } from "../queue/envelope.ts";
import type { Batch, DeadLetter } from "../queue/redis_queue.ts";
import { backoffDelay, Outage } from "./backoff.ts";
import { type UserStore, writeUsers } from "./user_writer.ts";

/** The queue operations the loop uses; `RedisQueue` provides them. */
export interface ConsumerQueue {
  register(consumerId: string, ttlMs: number): Promise<void>;
  heartbeat(consumerId: string, ttlMs: number): Promise<boolean>;
  fetch(consumerId: string, max: number): Promise<Batch | undefined>;
  ack(consumerId: string, batch: Batch, deadLetters: readonly DeadLetter[]): Promise<boolean>;
  recover(maxCrashes: number): Promise<{ recovered: number; buried: number; consumers: number }>;
  handBack(consumerId: string): Promise<number>;
}

/** A point of the loop, reported to {@link ConsumerOptions.onStep} (fault tests crash there). */
export type Step = "fetched" | "stored";

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
  readonly log?: (line: string) => void;
  readonly onStep?: (step: Step, batch: Batch) => void;
}

/** Running totals, for logs, tests and benchmarks. */
export interface ConsumerStats {
  stored: number;
  deadLettered: number;
  batches: number;
  recovered: number;
}

/** Raised inside the loop when the shutdown deadline passed during a retry. */
class ShutdownDeadline extends Error {}

/** One consumer: `run()` until `stop()`. */
export class Consumer {
  readonly stats: ConsumerStats = { stored: 0, deadLettered: 0, batches: 0, recovered: 0 };
  readonly #o: Required<Omit<ConsumerOptions, "onStep">> & Pick<ConsumerOptions, "onStep">;
  readonly #redis: Outage;
  readonly #postgres: Outage;
  #id: string;
  #stopRequested: number | undefined;
  #running: Promise<void> | undefined;
  #timers: ReturnType<typeof setInterval>[] = [];

  constructor(options: ConsumerOptions) {
    this.#o = { log: console.log, ...options };
    this.#redis = new Outage("redis", this.#o.log);
    this.#postgres = new Outage("postgres", this.#o.log);
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
    this.#stopRequested ??= Date.now();
    return this.#running ?? Promise.resolve();
  }

  get #stopping(): boolean {
    return this.#stopRequested !== undefined;
  }

  async #loop(): Promise<void> {
    const o = this.#o;
    await this.#retry(this.#redis, () => o.queue.register(this.#id, o.heartbeatTtlMs));
    o.log(`consumer ${this.#id} started (batch size ${o.batchSize})`);
    this.#startTimers();
    try {
      while (!this.#stopping) {
        const batch = await this.#retry(this.#redis, () => o.queue.fetch(this.#id, o.batchSize));
        if (batch === undefined) {
          await this.#reregister("its heartbeat expired and its work was recovered by others");
          continue;
        }
        if (batch.items.length === 0) {
          await this.#retry(this.#redis, () => this.#wait());
          continue;
        }
        o.onStep?.("fetched", batch);
        await this.#handle(batch);
      }
    } catch (error) {
      if (!(error instanceof ShutdownDeadline)) throw error;
      o.log("shutdown deadline passed with a batch in hand: handing it back");
    } finally {
      for (const timer of this.#timers) clearInterval(timer);
    }
    // Items still held (a batch abandoned at the deadline) go back to the front
    // of the queue; if Redis is unreachable now, the heartbeat expires and
    // another consumer recovers them instead. Nothing is lost either way.
    try {
      const returned = await o.queue.handBack(this.#id);
      o.log(`consumer ${this.#id} stopped; ${returned} items handed back`);
    } catch (error) {
      o.log(`consumer ${this.#id} stopped; hand-back failed, items await recovery: ${error}`);
    }
  }

  async #wait(): Promise<void> {
    const o = this.#o;
    // A client-side bound in case a reconnect leaves the blocking call hanging
    // (a known ioredis failure mode); main.ts resets the connection on timeout.
    await o.waitForItems(o.blockTimeoutSeconds);
  }

  async #handle(batch: Batch): Promise<void> {
    const o = this.#o;
    const deadLetters: DeadLetter[] = [];
    const users: UserEnvelope[] = [];
    const payloads: string[] = [];
    const now = new Date().toISOString();
    for (const payload of batch.items) {
      try {
        users.push(decodeEnvelope(payload));
        payloads.push(payload);
      } catch (error) {
        if (!(error instanceof PoisonMessageError)) throw error;
        deadLetters.push({ payload, reason: error.message, dead_at: now });
      }
    }
    if (users.length > 0) {
      const rejected = await this.#retry(this.#postgres, () => writeUsers(o.store, users));
      for (const { index, reason, sqlstate } of rejected) {
        deadLetters.push({ payload: payloads[index]!, reason, sqlstate, dead_at: now });
      }
      this.stats.stored += users.length - rejected.length;
    }
    o.onStep?.("stored", batch);
    const acked = await this.#retry(this.#redis, () => o.queue.ack(this.#id, batch, deadLetters));
    if (!acked) {
      // Our items were recovered while we worked; they will be redelivered and
      // the idempotent insert absorbs the repeat.
      await this.#reregister("it was presumed dead while storing a batch");
      return;
    }
    this.stats.batches++;
    this.stats.deadLettered += deadLetters.length;
    for (const letter of deadLetters) {
      o.log(`dead-lettered: ${letter.reason}${letter.sqlstate ? ` (${letter.sqlstate})` : ""}`);
    }
  }

  async #reregister(why: string): Promise<void> {
    const old = this.#id;
    this.#id = this.#o.newId();
    this.#o.log(`consumer ${old} was fenced (${why}); continuing as ${this.#id}`);
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
          o.log(
            `recovered ${recovered} items (${buried} dead-lettered) from ${consumers} dead consumers`,
          );
        }
      } catch {
        // Same as above: retried on the next tick.
      }
    };
    this.#timers.push(
      setInterval(heartbeat, Math.max(100, Math.floor(o.heartbeatTtlMs / 3))),
      setInterval(recover, o.recoveryIntervalMs),
    );
    void recover();
  }

  /**
   * Runs `work` until it succeeds. Errors are treated as transient (data
   * errors never reach here: the writer turns them into rejects). While
   * stopping, gives up at the shutdown deadline.
   */
  async #retry<T>(outage: Outage, work: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        const result = await work();
        outage.succeeded();
        return result;
      } catch (error) {
        outage.failed(error);
        let delay = backoffDelay(outage.failures - 1, { maxMs: this.#o.retryMaxDelayMs });
        if (this.#stopRequested !== undefined) {
          const left = this.#stopRequested + this.#o.shutdownTimeoutMs - Date.now();
          if (left <= 0) throw new ShutdownDeadline();
          delay = Math.min(delay, left);
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }
}
