/**
 * The consumer's membership of the queue: the id it is registered under,
 * the heartbeat that says it is alive (refreshed on a timer independent of
 * the work, however slow its inserts), the periodic recovery of the items of
 * consumers whose heartbeat expired, and the new id it takes once fenced.
 *
 * @module
 */

import type { ShardedQueue } from "@users-pipeline/queue";
import type { ConsumerEvent, ConsumerStats } from "./consumer_events.ts";
import type { Clock } from "@users-pipeline/runtime/clock";
import type { Retrier } from "./retrier.ts";

/** Options of {@linkcode Membership}. */
export interface MembershipOptions {
  readonly queue: Pick<ShardedQueue, "register" | "heartbeat" | "recover">;
  readonly retrier: Retrier;
  readonly clock: Clock;
  readonly heartbeatTtlMs: number;
  readonly recoveryIntervalMs: number;
  readonly maxCrashes: number;
  /** Mints a consumer id (a new one after being fenced). */
  readonly newId: () => string;
  readonly onEvent: (event: ConsumerEvent) => void;
  /** Counts the items recovered. */
  readonly stats: ConsumerStats;
}

/** Who the consumer is registered as, kept alive. */
export class Membership {
  readonly #options: MembershipOptions;
  #id: string;

  constructor(options: MembershipOptions) {
    this.#options = options;
    this.#id = options.newId();
  }

  /** The current id (its processing list is `<queue>:processing:<id>`). */
  get id(): string {
    return this.#id;
  }

  /** Registers the current id, retrying through outages. */
  async register(): Promise<void> {
    await this.#options.retrier.retry(
      "redis",
      () => this.#options.queue.register(this.#id, this.#options.heartbeatTtlMs),
    );
  }

  /**
   * Takes a new id and registers it: the old one was fenced, and whatever it
   * held was (or will be) recovered by others.
   */
  async reregister(reason: string): Promise<void> {
    const old = this.#id;
    this.#id = this.#options.newId();
    this.#options.onEvent({
      event: "consumer_fenced",
      consumer_id: old,
      new_consumer_id: this.#id,
      reason,
    });
    await this.register();
  }

  /** Starts the heartbeat and the recovery timers (a recovery at once); returns their stop. */
  startTimers(): () => void {
    const { queue, clock, heartbeatTtlMs, recoveryIntervalMs, maxCrashes, stats, onEvent } =
      this.#options;
    const heartbeat = async () => {
      try {
        await queue.heartbeat(this.#id, heartbeatTtlMs);
      } catch {
        // Fenced: the loop's next fetch or acknowledgement is refused too, and the loop takes the
        // new id (one place, so one new id). An outage: the loop reports it; a missed beat only
        // matters if it lasts a whole TTL, and then recovery is the right outcome.
      }
    };
    const recover = async () => {
      try {
        const { recovered, buried, consumers } = await queue.recover(maxCrashes);
        if (consumers > 0) {
          stats.recovered += recovered;
          onEvent({ event: "recovered", items: recovered, buried, consumers });
        }
      } catch {
        // Same as above: retried on the next tick.
      }
    };
    const stops = [
      clock.every(Math.max(100, Math.floor(heartbeatTtlMs / 3)), heartbeat),
      clock.every(recoveryIntervalMs, recover),
    ];
    void recover();
    return () => stops.forEach((stop) => stop());
  }
}
