/**
 * The Redis key names of one queue. Every key starts with the queue's name,
 * and the main list is the bare name, so the course's `LPUSH users …` still
 * feeds the same queue and `redis-cli --scan --pattern 'users*'` shows all of it.
 *
 * In a Redis Cluster, or with more than one shard, the keys carry a hash tag
 * (`{users}:retry`, `{users}:processing:<id>`…): a Lua script may only touch
 * keys of one hash slot, and every script of the queue touches several keys
 * of one shard. The main list keeps its bare name even then, as `users` and
 * `{users}` hash to the same slot, so the course's `LPUSH users` still feeds
 * the queue (with several shards, the one shard whose slot is that of
 * `users`). A standalone Redis with one shard keeps the untagged names, so
 * an existing deployment's keys do not move.
 *
 * Shards: shard s of K has a tag of its own, chosen so that its slot falls in
 * the s-th of K equal ranges of the 16384 slots. `redis-cli --cluster create`
 * gives the masters contiguous, equal ranges, so K shards over M masters
 * spread evenly (K = M puts one shard on each). Changing QUEUE_SHARDS, or
 * moving between standalone and cluster, changes the key names: do it with
 * an empty queue (stop the API, let the consumers drain, then restart all).
 *
 * @module
 */

import calculateSlot from "cluster-key-slot";

/** How many hash slots Redis Cluster has. */
export const HASH_SLOTS = 16_384;

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
  /**
   * Prefix of the records of `Idempotency-Key`s (`<prefix><key>`): each holds
   * the id its key was queued under and its user's fingerprint, for the
   * retention the API is given (IDEMPOTENCY_TTL_SECONDS).
   */
  readonly idempotencyPrefix: string;
}

/**
 * Derives every key of the queue called `name`, untagged (a standalone Redis,
 * one shard), or, given a hash tag, as the main list `tag` and the other keys
 * `{tag}:…`, all in the tag's slot.
 */
export function queueKeys(name: string, tag?: string): QueueKeys {
  const [queue, prefix] = tag === undefined ? [name, name] : [tag, `{${tag}}`];
  return {
    queue,
    retry: `${prefix}:retry`,
    dead: `${prefix}:dead`,
    consumers: `${prefix}:consumers`,
    deliveries: `${prefix}:deliveries`,
    processingPrefix: `${prefix}:processing:`,
    heartbeatPrefix: `${prefix}:heartbeat:`,
    queuedIds: `${prefix}:queued`,
    deadIds: `${prefix}:dead:ids`,
    deadCounts: `${prefix}:dead:counts`,
    stats: `${prefix}:stats`,
    idempotencyPrefix: `${prefix}:idempotency:`,
  };
}

/** Options of {@linkcode queueShards}. */
export interface QueueShardsOptions {
  /** How many shards (QUEUE_SHARDS). @default 1 */
  readonly shards?: number;
  /** True in a Redis Cluster: keys are tagged even for one shard. @default false */
  readonly cluster?: boolean;
}

/** The keys of every shard of the queue called `name`, shard 0 first. */
export function queueShards(
  name: string,
  { shards = 1, cluster = false }: QueueShardsOptions = {},
): QueueKeys[] {
  if (!Number.isInteger(shards) || shards < 1 || shards > HASH_SLOTS) {
    throw new RangeError(
      `Cannot split a queue into ${shards} shards: it must be between 1 and ${HASH_SLOTS}`,
    );
  }
  if (shards === 1 && !cluster) return [queueKeys(name)];
  return Array.from(
    { length: shards },
    (_, s) => queueKeys(name, shardTag(name, { shard: s, shards })),
  );
}

/**
 * The hash tag of shard `shard` of `shards` (an index, and the count): `name` itself for the shard
 * whose slot range holds `name`'s slot (so a raw `LPUSH <name>` feeds a
 * shard), else the first of `name:<shard>`, `name:<shard>.1`, `name:<shard>.2`…
 * whose slot falls in the shard's range (about `shards` tries, as CRC16
 * spreads such names evenly).
 */
export function shardTag(
  name: string,
  { shard, shards }: { shard: number; shards: number },
): string {
  const [low, high] = [slotRangeStart(shard, shards), slotRangeStart(shard + 1, shards)];
  const inRange = (tag: string) => {
    const slot = calculateSlot(tag);
    return slot >= low && slot < high;
  };
  if (inRange(name)) return name;
  if (inRange(`${name}:${shard}`)) return `${name}:${shard}`;
  for (let n = 1;; n++) {
    if (inRange(`${name}:${shard}.${n}`)) return `${name}:${shard}.${n}`;
  }
}

function slotRangeStart(shard: number, shards: number): number {
  return Math.floor(shard * HASH_SLOTS / shards);
}

/**
 * The shard of the user with id `id`. A function of the id, so a user's
 * status is read from one shard and everything about a user (its item, index
 * entry, dead letter, requeue) stays in one shard: the id's first 48 bits
 * modulo the number of shards. The API's ids are UUIDv7, whose first 48 bits
 * are the millisecond it accepted the user: the users of one millisecond go
 * to one shard and successive milliseconds to successive shards. So under
 * load the shards take turns evenly, while the users of one event-loop turn
 * mostly share a shard and are still pushed in one call (hashing each id
 * would split every turn's group K ways: K script calls instead of one). A
 * string that is not a UUID (never the API's) is hashed instead.
 */
export function shardOf(id: string, shards: number): number {
  if (shards === 1) return 0;
  const prefix = /^([0-9a-f]{8})-([0-9a-f]{4})-/i.exec(id);
  return prefix === null
    ? calculateSlot(id) % shards
    : Number.parseInt(prefix[1]! + prefix[2]!, 16) % shards;
}

/** One shard's keys, or every shard's. */
export type ShardKeys = QueueKeys | readonly QueueKeys[];

/** Every shard's keys, from one shard's or a list of them. */
export function shardList(keys: ShardKeys): readonly QueueKeys[] {
  return "queue" in keys ? [keys as QueueKeys] : keys as readonly QueueKeys[];
}
