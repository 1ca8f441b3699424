/**
 * The Lua scripts that make each queue step atomic, registered on an ioredis
 * client with `defineCommand` (which sends EVALSHA and falls back to EVAL after
 * a Redis restart has emptied the script cache).
 *
 * Why scripts: a crash between two separate commands must never leave an item
 * in neither list, so every move (queue → processing, processing → retry or
 * dead letters) happens inside one script, which Redis runs atomically and logs
 * to the AOF as a unit.
 *
 * Why `allow-oom` on the consumer's scripts: with `maxmemory-policy noeviction`
 * a full Redis refuses writes, but draining is exactly what frees memory, so
 * the consumer's scripts must still run. The API's enqueue script carries no
 * such flag, so a full Redis refuses new work instead (the API answers 503).
 *
 * The recovery script reads keys it derives from set members, so these scripts
 * assume a standalone Redis (not Redis Cluster).
 *
 * @module
 */

import type { Redis, Result } from "ioredis";

/**
 * KEYS: queue. ARGV: deadline (ms since the epoch, 0 for none), max length, payload…
 * Pushes all payloads, or none when they would take the list past its bound,
 * or when Redis runs the script after the deadline. Returns the new length,
 * -1 when the queue is full, or -2 when the deadline had passed.
 *
 * Why a deadline: a client that gives up waiting (the API answers 503 after
 * REDIS_TIMEOUT_MS) cannot take back a command it already sent. When Redis is
 * frozen or stalled, those commands sit in its socket buffer and run once it
 * resumes, queueing users who were told 503 — and stored twice if they
 * retried. With a deadline earlier than the client's timeout, a late push
 * does nothing. The deadline is read against Redis' clock (TIME), so this
 * assumes the API's clock and Redis' agree to well within the margin.
 */
const ENQUEUE = `#!lua
local deadline = tonumber(ARGV[1])
if deadline > 0 then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > deadline then return -2 end
end
local length = redis.call('LLEN', KEYS[1])
if length + #ARGV - 2 > tonumber(ARGV[2]) then return -1 end
return redis.call('LPUSH', KEYS[1], unpack(ARGV, 3))
`;

/**
 * KEYS: consumers, retry, queue, processing. ARGV: consumer id, max items.
 * Returns -1 when the consumer is no longer registered (its heartbeat expired
 * and its work was recovered: it must not take more under that id); otherwise
 * {1, item} for one recovered item (suspects are retried one at a time so a
 * poison item cannot take a batch down with it), or {0, items…} with up to
 * max items from the main list, newest first, now also in the processing list.
 *
 * A consumer holds one batch at a time, so items already in its processing
 * list belong to a fetch whose reply it never got (the command timed out
 * client-side but ran when Redis resumed, or Redis died between its AOF write
 * and the reply) and which it is now repeating: those same items are returned
 * again, newest first. Stacking a second batch on them would make the
 * acknowledgement, which trims by count from the oldest end, drop the first
 * batch unstored. (A re-sent recovered item comes back as {0, item}, so its
 * crash count is not cleared; it only matters if it crashes consumers again.)
 */
const FETCH = `#!lua flags=allow-oom
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
local held = redis.call('LRANGE', KEYS[4], 0, -1)
if #held > 0 then
  local newest_first = {}
  for i = #held, 1, -1 do newest_first[#newest_first + 1] = held[i] end
  return {0, newest_first}
end
local retried = redis.call('RPOPLPUSH', KEYS[2], KEYS[4])
if retried then return {1, retried} end
local items = redis.call('LRANGE', KEYS[3], -tonumber(ARGV[2]), -1)
local n = #items
if n == 0 then return {0} end
redis.call('LTRIM', KEYS[3], 0, -n - 1)
for i = 1, n, 1000 do
  redis.call('LPUSH', KEYS[4], unpack(items, i, math.min(i + 999, n)))
end
return {0, items}
`;

/**
 * KEYS: consumers, processing, deliveries, dead. ARGV: consumer id, count,
 * from retry ('1' or '0'), dead-letter records…
 * Acknowledges the oldest `count` items of the processing list (the batch just
 * handled: each fetch pushes at the left, so the oldest batch is at the right)
 * and records its dead letters, in one step. A fenced consumer acknowledges
 * nothing: its items were already handed to others, who will bury them too.
 * An empty processing list means this is a repeat of an acknowledgement that
 * ran but whose reply was lost: it does nothing, so no letter is buried twice.
 */
const ACK = `#!lua flags=allow-oom
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('LLEN', KEYS[2]) == 0 then return 1 end
if ARGV[3] == '1' then
  local item = redis.call('LINDEX', KEYS[2], -1)
  if item then redis.call('HDEL', KEYS[3], redis.sha1hex(item)) end
end
if #ARGV > 3 then redis.call('LPUSH', KEYS[4], unpack(ARGV, 4)) end
redis.call('LTRIM', KEYS[2], 0, -tonumber(ARGV[2]) - 1)
return 1
`;

/** KEYS: consumers, heartbeat. ARGV: consumer id, ttl ms. Registers a consumer. */
const REGISTER = `#!lua flags=allow-oom
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 1
`;

/**
 * KEYS: consumers, heartbeat. ARGV: consumer id, ttl ms.
 * Extends the heartbeat; returns 0 (and extends nothing) if the consumer was
 * declared dead in the meantime.
 */
const HEARTBEAT = `#!lua flags=allow-oom
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 1
`;

/**
 * KEYS: consumers, retry, dead, deliveries. ARGV: processing prefix, heartbeat
 * prefix, max crashes, now (ISO 8601).
 * For every registered consumer whose heartbeat has expired: counts one crash
 * against each item it held, moves the item to the retry list, or to the dead
 * letters once it has crashed `max crashes` consumers, and unregisters the
 * consumer. Returns {recovered, buried, consumers}.
 */
const RECOVER = `#!lua flags=allow-oom
local recovered, buried, dead_consumers = 0, 0, 0
local max_crashes = tonumber(ARGV[3])
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[2] .. id) == 0 then
    dead_consumers = dead_consumers + 1
    local processing = ARGV[1] .. id
    local items = redis.call('LRANGE', processing, 0, -1)
    for i = #items, 1, -1 do
      local item = items[i]
      local sha = redis.sha1hex(item)
      local crashes = redis.call('HINCRBY', KEYS[4], sha, 1)
      if crashes >= max_crashes then
        redis.call('HDEL', KEYS[4], sha)
        redis.call('LPUSH', KEYS[3], cjson.encode({
          payload = item,
          reason = 'consumer crashed while holding it ' .. crashes .. ' times',
          dead_at = ARGV[4],
        }))
        buried = buried + 1
      else
        redis.call('LPUSH', KEYS[2], item)
        recovered = recovered + 1
      end
    end
    redis.call('DEL', processing)
    redis.call('SREM', KEYS[1], id)
  end
end
return {recovered, buried, dead_consumers}
`;

/**
 * KEYS: consumers, heartbeat, processing, queue, deliveries. ARGV: consumer id.
 * Graceful exit: returns whatever the consumer still holds to the consuming
 * end of the main list (so it is next out, in its original order) and
 * unregisters the consumer. Returns how many items went back.
 *
 * The items' crash counts are cleared: a graceful stop is not a crash, and an
 * item recovered from a crashed consumer and then handed back would otherwise
 * keep its count in the hash for good (it is cleared only when acknowledged
 * as taken from the retry list, which a handed-back item no longer is).
 */
const HAND_BACK = `#!lua flags=allow-oom
local items = redis.call('LRANGE', KEYS[3], 0, -1)
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[4], unpack(items, i, math.min(i + 999, #items)))
end
if #items > 0 and redis.call('HLEN', KEYS[5]) > 0 then
  for _, item in ipairs(items) do redis.call('HDEL', KEYS[5], redis.sha1hex(item)) end
end
redis.call('DEL', KEYS[3], KEYS[2])
redis.call('SREM', KEYS[1], ARGV[1])
return #items
`;

/** The raw reply of the fetch script. */
type FetchReply = -1 | [0 | 1, string[] | string] | [0];

declare module "ioredis" {
  interface RedisCommander<Context> {
    queueEnqueue(
      queue: string,
      deadline: number,
      maxLength: number,
      ...payloads: string[]
    ): Result<number, Context>;
    queueFetch(
      consumers: string,
      retry: string,
      queue: string,
      processing: string,
      consumerId: string,
      max: number,
    ): Result<FetchReply, Context>;
    queueAck(
      consumers: string,
      processing: string,
      deliveries: string,
      dead: string,
      consumerId: string,
      count: number,
      fromRetry: "0" | "1",
      ...deadRecords: string[]
    ): Result<number, Context>;
    queueRegister(
      consumers: string,
      heartbeat: string,
      consumerId: string,
      ttlMs: number,
    ): Result<number, Context>;
    queueHeartbeat(
      consumers: string,
      heartbeat: string,
      consumerId: string,
      ttlMs: number,
    ): Result<number, Context>;
    queueRecover(
      consumers: string,
      retry: string,
      dead: string,
      deliveries: string,
      processingPrefix: string,
      heartbeatPrefix: string,
      maxCrashes: number,
      now: string,
    ): Result<[number, number, number], Context>;
    queueHandBack(
      consumers: string,
      heartbeat: string,
      processing: string,
      queue: string,
      deliveries: string,
      consumerId: string,
    ): Result<number, Context>;
  }
}

/** Registers the queue's scripts as commands on `redis`; idempotent. */
export function defineQueueScripts(redis: Redis): void {
  redis.defineCommand("queueEnqueue", { numberOfKeys: 1, lua: ENQUEUE });
  redis.defineCommand("queueFetch", { numberOfKeys: 4, lua: FETCH });
  redis.defineCommand("queueAck", { numberOfKeys: 4, lua: ACK });
  redis.defineCommand("queueRegister", { numberOfKeys: 2, lua: REGISTER });
  redis.defineCommand("queueHeartbeat", { numberOfKeys: 2, lua: HEARTBEAT });
  redis.defineCommand("queueRecover", { numberOfKeys: 4, lua: RECOVER });
  redis.defineCommand("queueHandBack", { numberOfKeys: 5, lua: HAND_BACK });
}
