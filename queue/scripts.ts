/**
 * The Lua scripts that make each queue step atomic, one file each in `lua/`
 * (the file's header names its KEYS, ARGV and reply, and says why it works
 * as it does), defined here with their keys and arguments by name for
 * {@linkcode runScript} (`lua_script.ts`). Every script declares every key it
 * touches, all of one shard's hash slot (`keys.ts`), so each runs on Redis
 * Cluster as on a standalone Redis (`lua/recover.lua` says how the ones that
 * visit every consumer manage).
 *
 * Why `allow-oom` on the consumer's scripts: with `maxmemory-policy noeviction`
 * a full Redis refuses writes, but draining is exactly what frees memory, so
 * the consumer's scripts must still run. The API's enqueue scripts carry no
 * such flag, so a full Redis refuses new work instead (the API answers 503).
 *
 * @module
 */

import { resolveIncludes } from "./lua_include.ts";
import { defineScript, defineScripts, type RedisClient, reply } from "./lua_script.ts";
import ackLua from "./lua/ack.lua" with { type: "text" };
import deadLettersTakeLua from "./lua/dead_letters_take.lua" with { type: "text" };
import enqueueLua from "./lua/enqueue.lua" with { type: "text" };
import enqueueOnceLua from "./lua/enqueue_once.lua" with { type: "text" };
import fetchLua from "./lua/fetch.lua" with { type: "text" };
import handBackLua from "./lua/hand_back.lua" with { type: "text" };
import heartbeatLua from "./lua/heartbeat.lua" with { type: "text" };
import overviewLua from "./lua/overview.lua" with { type: "text" };
import rateLimitLua from "./lua/rate_limit.lua" with { type: "text" };
import recoverLua from "./lua/recover.lua" with { type: "text" };
import registerLua from "./lua/register.lua" with { type: "text" };
import pastDeadlineLua from "./lua/includes/past_deadline.lua" with { type: "text" };
import takeLua from "./lua/includes/take.lua" with { type: "text" };
import withIdLua from "./lua/includes/with_id.lua" with { type: "text" };

export type { RedisClient } from "./lua_script.ts";

/** Every file of `lua/` by its path there, for the includes. */
const FILES: Readonly<Record<string, string>> = {
  "ack.lua": ackLua,
  "dead_letters_take.lua": deadLettersTakeLua,
  "enqueue.lua": enqueueLua,
  "enqueue_once.lua": enqueueOnceLua,
  "fetch.lua": fetchLua,
  "hand_back.lua": handBackLua,
  "heartbeat.lua": heartbeatLua,
  "overview.lua": overviewLua,
  "rate_limit.lua": rateLimitLua,
  "recover.lua": recoverLua,
  "register.lua": registerLua,
  "includes/past_deadline.lua": pastDeadlineLua,
  "includes/take.lua": takeLua,
  "includes/with_id.lua": withIdLua,
};

/** The raw reply of the overview script. */
export type OverviewReply = [
  number,
  number,
  number,
  string | null,
  [string, number, number, string][],
  string[],
  string[],
  string | null,
];

/** The raw reply of the keyed enqueue script, its ids joined by spaces: see `lua/enqueue_once.lua`. */
export type EnqueueOnceReply = -2 | 0 | [1 | 2 | 3, string];

/** The raw reply of the fetch script: see `lua/fetch.lua`. */
export type FetchReply = -1 | [0 | 1, string[] | string] | [0] | [2];

/** `lua/enqueue.lua`; rest: the payloads, then their ids. */
export const ENQUEUE = defineScript({
  name: "queueEnqueue",
  lua: resolveIncludes("enqueue.lua", FILES),
  keys: ["queue", "queuedIds"],
  args: ["deadline", "maxLength", "count", "whole"],
  restArgs: true,
  reply: reply<number>(),
});

/** `lua/enqueue_once.lua`; rest: the envelopes, then their ids, then their names. */
export const ENQUEUE_ONCE = defineScript({
  name: "queueEnqueueOnce",
  lua: resolveIncludes("enqueue_once.lua", FILES),
  keys: ["queue", "queuedIds", "record"],
  args: ["deadline", "maxLength", "ttlSeconds", "count"],
  restArgs: true,
  reply: reply<EnqueueOnceReply>(),
});

/** `lua/fetch.lua`. */
export const FETCH = defineScript({
  name: "queueFetch",
  lua: resolveIncludes("fetch.lua", FILES),
  keys: ["consumers", "retry", "queue", "processing"],
  args: ["consumerId", "max", "held", "holdingElsewhere"],
  reply: reply<FetchReply>(),
});

/** `lua/ack.lua`; rest: the stored ids, then three values per dead letter. */
export const ACK = defineScript({
  name: "queueAck",
  lua: resolveIncludes("ack.lua", FILES),
  keys: [
    "consumers",
    "processing",
    "deliveries",
    "dead",
    "queuedIds",
    "deadIds",
    "deadCounts",
    "stats",
    "retry",
    "queue",
  ],
  args: ["consumerId", "count", "fromRetry", "oldestItem", "next", "heldAfter", "storedCount"],
  restArgs: true,
  reply: reply<0 | 1 | Exclude<FetchReply, -1>>(),
});

/** `lua/register.lua`. */
export const REGISTER = defineScript({
  name: "queueRegister",
  lua: resolveIncludes("register.lua", FILES),
  keys: ["consumers", "heartbeat"],
  args: ["consumerId", "ttlMs"],
  reply: reply<number>(),
});

/** `lua/heartbeat.lua`. */
export const HEARTBEAT = defineScript({
  name: "queueHeartbeat",
  lua: resolveIncludes("heartbeat.lua", FILES),
  keys: ["consumers", "heartbeat"],
  args: ["consumerId", "ttlMs"],
  reply: reply<0 | 1>(),
});

/**
 * `lua/recover.lua`; rest keys: each consumer's processing list and
 * heartbeat; rest arguments: those consumers' ids.
 */
export const RECOVER = defineScript({
  name: "queueRecover",
  lua: resolveIncludes("recover.lua", FILES),
  keys: [
    "consumers",
    "retry",
    "dead",
    "deliveries",
    "queuedIds",
    "deadIds",
    "deadCounts",
    "stats",
  ],
  args: ["maxCrashes", "now"],
  restKeys: true,
  restArgs: true,
  reply: reply<[recovered: number, buried: number, consumers: number]>(),
});

/** `lua/hand_back.lua`. */
export const HAND_BACK = defineScript({
  name: "queueHandBack",
  lua: resolveIncludes("hand_back.lua", FILES),
  keys: ["consumers", "heartbeat", "processing", "queue", "deliveries", "stats"],
  args: ["consumerId"],
  reply: reply<number>(),
});

/**
 * `lua/dead_letters_take.lua`; rest: the letters to take (none for any), each
 * a user id or, for a letter without one, its whole record.
 */
export const DEAD_LETTERS_TAKE = defineScript({
  name: "queueDeadLettersTake",
  lua: resolveIncludes("dead_letters_take.lua", FILES),
  keys: ["dead", "queue", "queuedIds", "deadIds", "deadCounts", "deliveries"],
  args: ["action", "cursor", "window", "kind"],
  restArgs: true,
  reply: reply<[taken: number, cursor: number, done: 0 | 1]>(),
});

/**
 * `lua/overview.lua`; rest keys: each consumer's processing list and
 * heartbeat; rest arguments: those consumers' ids.
 */
export const OVERVIEW = defineScript({
  name: "queueOverview",
  lua: resolveIncludes("overview.lua", FILES),
  keys: ["queue", "retry", "dead", "consumers", "deadCounts", "stats"],
  args: [],
  restKeys: true,
  restArgs: true,
  reply: reply<OverviewReply>(),
});

/** Every script of the queue. */
export const QUEUE_SCRIPTS = [
  ENQUEUE,
  ENQUEUE_ONCE,
  FETCH,
  ACK,
  REGISTER,
  HEARTBEAT,
  RECOVER,
  HAND_BACK,
  DEAD_LETTERS_TAKE,
  OVERVIEW,
] as const;

/**
 * `lua/rate_limit.lua`: the API's rate per client (`server/rate_limit.ts`). No step of the
 * queue, so not among {@linkcode QUEUE_SCRIPTS}; its one key is the client's own, in a slot of
 * its own in a cluster.
 */
export const RATE_LIMIT = defineScript({
  name: "apiRateLimit",
  lua: resolveIncludes("rate_limit.lua", FILES),
  keys: ["bucket"],
  args: ["intervalUs", "burst", "cost"],
  reply: reply<[allowed: 0 | 1, remaining: number, resetUs: number, retryUs: number]>(),
});

/**
 * The commands of the scripts called with their number of keys first (two
 * keys per consumer). ioredis' automatic pipelining in a cluster picks a
 * command's node by its first argument, taken as a key: these must bypass it
 * (sent alone, they are routed by their real keys).
 */
export const SCRIPTS_WITH_KEY_COUNT: readonly string[] = QUEUE_SCRIPTS
  .filter((script) => script.restKeys).map((script) => script.name);

/**
 * Registers the queue's scripts as commands on `redis`; idempotent. Needed
 * before a script runs on a pipeline of `redis` (`lua_script.ts`).
 */
export function defineQueueScripts(redis: RedisClient): void {
  defineScripts(redis, ...QUEUE_SCRIPTS);
}
