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
  };
}
