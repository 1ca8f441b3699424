/**
 * The Redis key names of one queue. Every key starts with the queue's name,
 * and the main list is the bare name, so the course's `LPUSH users …` still
 * feeds the same queue and `redis-cli --scan --pattern 'users*'` shows all of it.
 *
 * @module
 */

/** The keys of the queue called `name`. */
export interface QueueKeys {
  /** The main list: the API LPUSHes at the left, consumers take from the right (FIFO). */
  readonly queue: string;
  /** Items recovered from a crashed consumer; taken one at a time, before the main list. */
  readonly retry: string;
  /** Items that can never be stored, each a JSON record with the reason. */
  readonly dead: string;
  /** Set of live consumer ids: a consumer may take work only while it is a member. */
  readonly consumers: string;
  /** Hash of SHA-1(item) → how many consumers crashed while holding it. */
  readonly deliveries: string;
  /** Prefix of the per-consumer processing lists (`<prefix><consumer id>`). */
  readonly processingPrefix: string;
  /** Prefix of the per-consumer heartbeat keys (`<prefix><consumer id>`). */
  readonly heartbeatPrefix: string;
  /**
   * The status index, part 1: set of the ids of accepted users still queued
   * anywhere (main, retry or a processing list); an id leaves it when its user
   * is stored or buried. Written by the same scripts that move the items, so
   * `GET /users/<id>` reads one member instead of scanning the backlog. A set
   * rather than a hash: the push pays for the index, and SADD is its cheapest
   * durable write (no value to store).
   */
  readonly queuedIds: string;
  /** The status index, part 2: hash of the id of each buried accepted user → its dead letter. */
  readonly deadIds: string;
  /** Hash of dead-letter kind → how many dead letters of that kind the dead list holds. */
  readonly deadCounts: string;
  /**
   * Hash of counters kept by the acknowledgement: `stored` (rows acknowledged
   * as stored, all consumers) and `stored:<consumer id>` (per live consumer,
   * removed when it unregisters or is recovered).
   */
  readonly stats: string;
}

/** Derives every key of the queue called `name`. */
export function queueKeys(name: string): QueueKeys {
  return {
    queue: name,
    retry: `${name}:retry`,
    dead: `${name}:dead`,
    consumers: `${name}:consumers`,
    deliveries: `${name}:deliveries`,
    processingPrefix: `${name}:processing:`,
    heartbeatPrefix: `${name}:heartbeat:`,
    queuedIds: `${name}:queued`,
    deadIds: `${name}:dead:ids`,
    deadCounts: `${name}:dead:counts`,
    stats: `${name}:stats`,
  };
}
