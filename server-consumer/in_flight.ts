/**
 * The batches a consumer holds, in the order it took them, which is the
 * order their acknowledgements trim its processing list in: at most the one
 * whose acknowledgement is in flight, the one in hand (being stored), and the
 * ones taken ahead (fetched, and maybe being stored, during the insert of the
 * one in hand), oldest first.
 *
 * @module
 */

import type { FetchedBatch } from "@users-pipeline/queue";
import type { StoredBatch } from "./store_step.ts";

/** Where a batch in flight is. */
export type Stage = "acking" | "in_hand" | "ahead";

/** One batch in flight. */
export interface InFlightBatch {
  readonly batch: FetchedBatch;
  stage: Stage;
  /** Its store, once started (a batch taken ahead is stored as soon as it arrives). */
  stored: Promise<StoredBatch<FetchedBatch>> | null;
  /** Its acknowledgement, once sent; it resolves to the batch it fetched, if any. */
  acked: Promise<FetchedBatch | undefined> | null;
}

/** The consumer's batches in flight, oldest first. */
export class InFlight {
  #batches: InFlightBatch[] = [];

  /** How many items the batches in flight hold. */
  get items(): number {
    return this.#batches.reduce((sum, { batch }) => sum + batch.items.length, 0);
  }

  /** How many batches are taken ahead. */
  get aheadCount(): number {
    return this.#batches.filter(({ stage }) => stage === "ahead").length;
  }

  /** The oldest batch taken ahead, to be stored next; undefined when there is none. */
  get ahead(): InFlightBatch | undefined {
    return this.#find("ahead");
  }

  /** The acknowledgement in flight (it resolves to the batch it fetched); undefined when none. */
  get acking(): Promise<FetchedBatch | undefined> | undefined {
    return this.#find("acking")?.acked ?? undefined;
  }

  /** Adds `batch` as taken ahead, with its store if started. */
  putAhead(batch: FetchedBatch, stored: InFlightBatch["stored"] = null): void {
    this.#batches.push({ batch, stage: "ahead", stored, acked: null });
  }

  /** The oldest batch taken ahead, now in hand; undefined when none is ahead. */
  takeInHand(): InFlightBatch | undefined {
    const ahead = this.ahead;
    if (ahead !== undefined) ahead.stage = "in_hand";
    return ahead;
  }

  /** `batch`, just fetched, now in hand. */
  hold(batch: FetchedBatch): InFlightBatch {
    const entry: InFlightBatch = { batch, stage: "in_hand", stored: null, acked: null };
    this.#batches.push(entry);
    return entry;
  }

  /** `entry` is being acknowledged by `acked`, which runs while the next one is stored. */
  acknowledging(entry: InFlightBatch, acked: Promise<FetchedBatch | undefined>): void {
    entry.stage = "acking";
    entry.acked = acked;
  }

  /** The acknowledgement in flight has settled: its batch is no longer held. */
  ackSettled(): void {
    this.#batches = this.#batches.filter(({ stage }) => stage !== "acking");
  }

  /** `entry` was acknowledged (or dropped): it is no longer held. */
  release(entry: InFlightBatch): void {
    this.#batches = this.#batches.filter((held) => held !== entry);
  }

  /** Drops every batch: fenced, the consumer holds nothing any more (recovery has it). */
  clear(): void {
    this.#batches = [];
  }

  #find(stage: Stage): InFlightBatch | undefined {
    return this.#batches.find((entry) => entry.stage === stage);
  }
}
