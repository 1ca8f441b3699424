/**
 * The consumer's membership of the queue: the id it is registered under,
 * the heartbeat that says it is alive (refreshed on a timer independent of
 * the work, however slow its inserts), the periodic recovery of the items of
 * consumers whose heartbeat expired, and the new id it takes once fenced.
 *
 * @module
 */

import { FencedError } from "@users-pipeline/queue";
import type { ConsumerQueue } from "./consumer.ts";
import type { ConsumerEvent, ConsumerStats } from "./consumer_events.ts";
import type { Clock } from "@users-pipeline/runtime/clock";
import type { Retrier } from "./retrier.ts";

/** Options of {@linkcode Membership}. */
export interface MembershipOptions {
  readonly queue: Pick<ConsumerQueue, "register" | "heartbeat" | "recover">;
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
  readonly #o: MembershipOptions;
  #id: string;

  constructor(options: MembershipOptions) {
    this.#o = options;
    this.#id = options.newId();
  }

  /** The current id (its processing list is `<queue>:processing:<id>`). */
  get id(): string {
    return this.#id;
  }

  /** Registers the current id, retrying through outages. */
  async register(): Promise<void> {
    await this.#o.retrier.run(
      "redis",
      () => this.#o.queue.register(this.#id, this.#o.heartbeatTtlMs),
    );
  }

  /**
   * Takes a new id and registers it: the old one was fenced, and whatever it
   * held was (or will be) recovered by others.
   */
  async reregister(reason: string): Promise<void> {
    const old = this.#id;
    this.#id = this.#o.newId();
    this.#o.onEvent({
      event: "consumer_fenced",
      consumer_id: old,
      new_consumer_id: this.#id,
      reason,
    });
    await this.register();
  }

  /** Starts the heartbeat and the recovery timers (a recovery at once); returns their stop. */
  startTimers(): () => void {
    const o = this.#o;
    const heartbeat = async () => {
      try {
        await o.queue.heartbeat(this.#id, o.heartbeatTtlMs);
      } catch (error) {
        // Fenced: the loop's next fetch or acknowledgement is refused too, and
        // the loop takes the new id (one place, so one new id).
        if (error instanceof FencedError) return;
        // The fetch loop reports Redis outages; a missed beat only matters if
        // it lasts a whole TTL, and then recovery is the right outcome.
      }
    };
    const recover = async () => {
      try {
        const { recovered, buried, consumers } = await o.queue.recover(o.maxCrashes);
        if (consumers > 0) {
          o.stats.recovered += recovered;
          o.onEvent({ event: "recovered", items: recovered, buried, consumers });
        }
      } catch {
        // Same as above: retried on the next tick.
      }
    };
    const stops = [
      o.clock.every(Math.max(100, Math.floor(o.heartbeatTtlMs / 3)), heartbeat),
      o.clock.every(o.recoveryIntervalMs, recover),
    ];
    void recover();
    return () => stops.forEach((stop) => stop());
  }
}
