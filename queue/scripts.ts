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
 * Every script declares every key it touches in KEYS, all of one shard (one
 * hash slot: `keys.ts`), so each runs on Redis Cluster as on a standalone
 * Redis. The scripts that visit each registered consumer (recovery, the
 * overview) cannot derive those consumers' keys from the set's members inside
 * Redis: the caller reads the members first and passes their keys, and the
 * script re-checks, atomically, what it relies on (membership, an expired
 * heartbeat), skipping a member it was not given (the next round sees it).
 *
 * @module
 */

import type { Cluster, Redis, Result } from "ioredis";

/** A client the scripts run on: one standalone Redis, or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/**
 * The pushes' first step: Lua that ends the script with -2 when ARGV[1], a
 * deadline in ms since the epoch (0 for none), has passed by Redis' clock.
 */
const PAST_DEADLINE = `
local deadline = tonumber(ARGV[1])
if deadline > 0 then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > deadline then return -2 end
end
`;

/**
 * KEYS: queue, queued ids. ARGV: deadline (ms since the epoch, 0 for none),
 * max length, mode ('all' or 'fit'), n, n payloads, then their n user ids.
 * Pushes the payloads in order and adds their ids to the queued set. When not
 * all fit under the bound, mode 'all' pushes none and mode 'fit' pushes as
 * many of the first as fit (the API's grouped pushes: each request of the
 * group that fits is accepted, the rest are refused as "full", exactly as if
 * each had been pushed alone, in order). Nothing is pushed when Redis runs
 * the script after the deadline. Returns how many were pushed, or -2 when the
 * deadline had passed.
 *
 * Why the ids travel beside the payloads: Redis need not decode any JSON on
 * the hot path, and the index entry exists from the very moment the push does
 * (the API answers 202 only after this script ran), so a `GET /users/<id>`
 * after the 202 always finds the user. This SADD is the index's whole cost
 * on the ingest path (measured: about 3 µs of Redis CPU per push with the
 * append-only file on, most of it for writing a second command to it).
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
${PAST_DEADLINE}local count = tonumber(ARGV[4])
local n = count
local room = tonumber(ARGV[2]) - redis.call('LLEN', KEYS[1])
if room < n then
  if ARGV[3] == 'all' then return 0 end
  n = math.max(room, 0)
end
for i = 5, 4 + n, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, 4 + n)))
end
local ids = 5 + count
for i = ids, ids + n - 1, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, ids + n - 1)))
end
return n
`;

/**
 * KEYS: queue, queued ids, the idempotency key's record. ARGV: deadline (ms
 * since the epoch, 0 for none), max length, payload, its user id, the user's
 * fingerprint (the trimmed name), the record's time to live in seconds.
 * ENQUEUE for one user sent with an `Idempotency-Key`: the record holds the
 * id the key was first queued under and the SHA-1 of that user's name.
 * Returns -2 when the deadline had passed (nothing done), 0 when the queue is
 * full and the key is new (nothing done), or {status, id}: 1 pushed under
 * this call's id (the record written in the same step, so a key is never
 * recorded without its push or the other way round); 2 the key was queued
 * before, for the same name, under that id (nothing pushed); 3 the key was
 * queued before for another name, under that id (nothing pushed).
 *
 * Why a seen key rewrites its record (same value, same expiry): a write of
 * this connection's own is what WAIT counts replicas for, so a 202 for a key
 * first pushed under a 503 "unconfirmed" waits, like a push, for that push to
 * be on enough replicas (a replica's stream is in order).
 */
const ENQUEUE_ONCE = `#!lua
${PAST_DEADLINE}local fingerprint = redis.sha1hex(ARGV[5])
local seen = redis.call('GET', KEYS[3])
if seen then
  redis.call('SET', KEYS[3], seen, 'KEEPTTL')
  local id = string.sub(seen, 1, 36)
  if string.sub(seen, 38) == fingerprint then return {2, id} end
  return {3, id}
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('LPUSH', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[4] .. ' ' .. fingerprint, 'EX', ARGV[6])
return {1, ARGV[4]}
`;

/**
 * KEYS: consumers, retry, queue, processing. ARGV: consumer id, max items,
 * held (how many items the consumer knows its processing list holds),
 * holding elsewhere ('1' when it holds a batch in another shard's list).
 * Returns -1 when the consumer is no longer registered (its heartbeat expired
 * and its work was recovered: it must not take more under that id); otherwise
 * {1, item} for one recovered item (suspects are retried one at a time so a
 * poison item cannot take a batch down with it), or {0, items…} with up to
 * max items from the main list, newest first, now also in the processing list.
 *
 * The items go into the processing list oldest at the right, the end the
 * acknowledgement trims from. A consumer holds at most two batches: the one
 * it is storing (at the right) and the next (at the left), fetched while the
 * first is being inserted, or taken in the same move as the first, whose
 * oldest items the first batch then is. (Oldest at the right also makes a
 * hand-back, which puts the list back at the front of the queue, keep FIFO.)
 * A recovered item is handed only to a consumer holding nothing, so a suspect
 * is never held beside other items: a fetch made while holding a batch (in
 * this shard's list or another's) gets nothing, {2}, when the retry list is
 * not empty, and the consumer fetches again once its batch is acknowledged.
 *
 * The consumer says how many items it holds; anything beyond that belongs to a fetch
 * whose reply it never got (the command timed out client-side but ran when
 * Redis resumed, or Redis died between its AOF write and the reply) and which
 * it is now repeating: those same items are returned again, newest first.
 * Stacking a further batch on them would make an acknowledgement, which trims
 * by count from the oldest end, drop a batch unstored. (A re-sent recovered
 * item comes back as {0, item}, so its crash count is not cleared; it only
 * matters if it crashes consumers again.)
 */
/**
 * Lua that gives an id to an item the course's producer pushed: `with_id(item,
 * i)` returns the item as it is, unless it is exactly `{"name": <string>}`
 * (what the course's `LPUSH users` and `redis-cli LPUSH users '{"name":"Ada"}'`
 * push), which it returns as an envelope with a fresh UUIDv7 and
 * `enqueued_at` set to now (when it was pushed is not known).
 *
 * Why at the take, in the same script as the move into the processing list:
 * the rewritten item is what the processing list holds, so a redelivery
 * (recovery, a repeated fetch, a hand-back) carries the same id, and the
 * insert, idempotent by id, stays exactly once. Only an item that does not
 * start as the API's envelopes do (`{"id":"`) is decoded, so the API's items
 * cost one prefix comparison. Anything else stays as it is, and the consumer
 * buries it with its reason.
 *
 * The id: the UUIDv7 layout (48 bits of Redis' clock in ms, version 7, the
 * RFC 9562 variant) with its 74 other bits from SHA-1 over the processing
 * list's name, Redis' clock in µs, the item's place in the take and the
 * item. The processing list belongs to one consumer of one shard, and one
 * consumer's takes are one round trip apart, so no two items of the whole
 * deployment hash the same input; scripts may not call a random source
 * whose outcome replicas could not repeat, and their effects (the rewritten
 * item) are what is replicated.
 */
const WITH_ID = `
local function with_id(item, i)
  if string.sub(item, 1, 7) == '{"id":"' then return item end
  local ok, user = pcall(cjson.decode, item)
  if not ok or type(user) ~= 'table' or type(user.name) ~= 'string' then return item end
  for field in pairs(user) do
    if field ~= 'name' then return item end
  end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local h = redis.sha1hex(processing .. '|' .. now[1] .. '.' .. now[2] .. '|' .. i .. '|' .. item)
  local variant = string.sub('89ab', tonumber(string.sub(h, 4, 4), 16) % 4 + 1, tonumber(string.sub(h, 4, 4), 16) % 4 + 1)
  local id = string.format('%08x-%04x-7%s-%s%s-%s', math.floor(ms / 65536), ms % 65536,
    string.sub(h, 1, 3), variant, string.sub(h, 5, 7), string.sub(h, 8, 19))
  return '{"id":"' .. id .. '","name":' .. cjson.encode(user.name) .. ',"enqueued_at":' .. string.format('%d', ms) .. '}'
end
`;

/**
 * The taking step of FETCH, shared with ACK's fetch of the next batch: Lua
 * over the locals `retry`, `queue`, `processing` (keys), `max`, `held`
 * (numbers) and `elsewhere` (boolean), run once the consumer is known to be
 * registered; it returns the script's reply (see FETCH). Items taken from the
 * main list pass through WITH_ID's `with_id` on their way.
 */
const TAKE = `${WITH_ID}
local unknown = redis.call('LLEN', processing) - held
if unknown > 0 then
  return {0, redis.call('LRANGE', processing, 0, unknown - 1)}
end
if held > 0 or elsewhere then
  if redis.call('LLEN', retry) > 0 then return {2} end
else
  local retried = redis.call('RPOPLPUSH', retry, processing)
  if retried then return {1, retried} end
end
local items = redis.call('LRANGE', queue, -max, -1)
local n = #items
if n == 0 then return {0} end
redis.call('LTRIM', queue, 0, -n - 1)
for i = 1, n do items[i] = with_id(items[i], i) end
local oldest_first = {}
for i = n, 1, -1 do oldest_first[#oldest_first + 1] = items[i] end
for i = 1, n, 1000 do
  redis.call('LPUSH', processing, unpack(oldest_first, i, math.min(i + 999, n)))
end
return {0, items}
`;

const FETCH = `#!lua flags=allow-oom
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
local retry, queue, processing = KEYS[2], KEYS[3], KEYS[4]
local max, held, elsewhere = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
${TAKE}`;

/**
 * KEYS: consumers, processing, deliveries, dead, queued ids, dead ids, dead
 * counts, stats, retry, queue. ARGV: consumer id, count, from retry ('1' or
 * '0'), the batch's oldest item, next (most items to fetch once
 * acknowledged, 0 for none), held (items the consumer still holds once this
 * batch is acknowledged: the batch fetched while this one was stored, or 0),
 * s, the s ids stored, then for each dead letter three values: its user id
 * ('' when unknown), its kind, its JSON record.
 * Returns 0 when the consumer is fenced (nothing acknowledged, nothing
 * fetched); otherwise 1 when next is 0, or else the next batch exactly as
 * FETCH returns it for a consumer holding `held` items.
 *
 * Acknowledges the oldest `count` items of the processing list (the batch just
 * handled: each fetch pushes at the left, so the oldest batch is at the right)
 * and records its dead letters, in one step. A fenced consumer acknowledges
 * nothing: its items were already handed to others, who will bury them too.
 *
 * The batch's oldest item must be the one at the right end: otherwise this is
 * a repeat of an acknowledgement that ran but whose reply was lost (a command
 * timed out client-side and ran when Redis resumed, say), and it acknowledges
 * nothing, so no letter is buried twice and, above all, nothing else is
 * trimmed: the list may already hold the next batch, fetched while this one
 * was stored, and trimming `count` items again would drop its oldest
 * unstored. (The API's payloads carry their user's id, so two of them are
 * never the same string; only the same payload pushed twice can be, and
 * then either copy carries the whole of what the other does.)
 *
 * Why the fetch rides on the acknowledgement: the consumer needs its next
 * batch either way, and one script call instead of two is one round trip,
 * one EVALSHA and one `MULTI … EXEC` in the append-only file less per batch
 * (per user, in single mode). The fetch part is FETCH's, repeat rule
 * included: a call repeated after a lost reply acknowledges nothing more and
 * returns the batch that reply carried.
 *
 * The index, in the same step: a stored id leaves the queued set (this runs
 * only after PostgreSQL committed, so from the moment the id is gone the row
 * is there: the status lookup reads the index first and PostgreSQL second,
 * and can never miss a user between the two); a buried id moves from the
 * queued set to the dead ids with its record, but only if it was queued (an
 * item pushed without the index, the course's raw LPUSH, leaves nothing
 * behind). The stored ids leave first, so an id both stored and buried in
 * one batch (an id clash) reads as stored, which it is. Each dead letter
 * counts once under its kind, and `stored` counts the rows acknowledged.
 */
const ACK = `#!lua flags=allow-oom
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('LINDEX', KEYS[2], -1) == ARGV[4] then
  if ARGV[3] == '1' then redis.call('HDEL', KEYS[3], redis.sha1hex(ARGV[4])) end
  local stored = tonumber(ARGV[7])
  if stored > 0 then
    for i = 8, 7 + stored, 1000 do
      redis.call('SREM', KEYS[5], unpack(ARGV, i, math.min(i + 999, 7 + stored)))
    end
    redis.call('HINCRBY', KEYS[8], 'stored', stored)
    redis.call('HINCRBY', KEYS[8], 'stored:' .. ARGV[1], stored)
  end
  for i = 8 + stored, #ARGV, 3 do
    local id, kind, record = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    redis.call('LPUSH', KEYS[4], record)
    redis.call('HINCRBY', KEYS[7], kind, 1)
    if id ~= '' and redis.call('SREM', KEYS[5], id) == 1 then
      redis.call('HSET', KEYS[6], id, record)
    end
  end
  redis.call('LTRIM', KEYS[2], 0, -tonumber(ARGV[2]) - 1)
end
local max = tonumber(ARGV[5])
if max == 0 then return 1 end
local retry, queue, processing = KEYS[9], KEYS[10], KEYS[2]
local held, elsewhere = tonumber(ARGV[6]), false
${TAKE}`;

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
 * KEYS: consumers, retry, dead, deliveries, queued ids, dead ids, dead
 * counts, stats, then for each consumer to examine its processing list and
 * its heartbeat. ARGV: max crashes, now (ISO 8601), then those consumers' ids.
 * For every consumer given that is still registered and whose heartbeat has
 * expired (both checked here, atomically with the moves): counts one crash
 * against each item it held, moves the item to the retry list, or to the dead
 * letters (kind `consumer_crashed`) once it has crashed `max crashes`
 * consumers, and unregisters the consumer (dropping its `stored:<id>`
 * counter). Returns {recovered, buried, consumers}.
 *
 * A retried item stays queued in the index. A buried one is decoded here,
 * only to find its id (rare, so the JSON decoding is affordable), and moves
 * from the queued ids to the dead ids if it was queued.
 */
const RECOVER = `#!lua flags=allow-oom
local recovered, buried, dead_consumers = 0, 0, 0
local max_crashes = tonumber(ARGV[1])
for c = 3, #ARGV do
  local id = ARGV[c]
  local processing, heartbeat = KEYS[7 + 2 * (c - 2)], KEYS[8 + 2 * (c - 2)]
  if redis.call('SISMEMBER', KEYS[1], id) == 1 and redis.call('EXISTS', heartbeat) == 0 then
    dead_consumers = dead_consumers + 1
    local items = redis.call('LRANGE', processing, 0, -1)
    for i = #items, 1, -1 do
      local item = items[i]
      local sha = redis.sha1hex(item)
      local crashes = redis.call('HINCRBY', KEYS[4], sha, 1)
      if crashes >= max_crashes then
        redis.call('HDEL', KEYS[4], sha)
        local ok, decoded = pcall(cjson.decode, item)
        local user_id = nil
        if ok and type(decoded) == 'table' and type(decoded.id) == 'string' then
          user_id = decoded.id
        end
        local record = cjson.encode({
          payload = item,
          reason = 'consumer crashed while holding it ' .. crashes .. ' times',
          kind = 'consumer_crashed',
          id = user_id,
          dead_at = ARGV[2],
        })
        redis.call('LPUSH', KEYS[3], record)
        redis.call('HINCRBY', KEYS[7], 'consumer_crashed', 1)
        if user_id and redis.call('SREM', KEYS[5], user_id) == 1 then
          redis.call('HSET', KEYS[6], user_id, record)
        end
        buried = buried + 1
      else
        redis.call('LPUSH', KEYS[2], item)
        recovered = recovered + 1
      end
    end
    redis.call('DEL', processing)
    redis.call('SREM', KEYS[1], id)
    redis.call('HDEL', KEYS[8], 'stored:' .. id)
  end
end
return {recovered, buried, dead_consumers}
`;

/**
 * KEYS: consumers, heartbeat, processing, queue, deliveries, stats. ARGV:
 * consumer id.
 * Graceful exit: returns whatever the consumer still holds to the consuming
 * end of the main list (so it is next out, in its original order) and
 * unregisters the consumer (dropping its `stored:<id>` counter). Returns how
 * many items went back; they stay queued in the index.
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
redis.call('HDEL', KEYS[6], 'stored:' .. ARGV[1])
return #items
`;

/**
 * KEYS: dead, queue, queued ids, dead ids, dead counts, deliveries. ARGV:
 * action (`requeue`
 * or `purge`), cursor (records already examined and kept, counted from the
 * oldest end), window (how many records to examine), kind ('' for any), then
 * user ids (none for any).
 * One chunk of a requeue or purge: examines the `window` oldest dead letters
 * not yet examined and takes those that match, in one atomic step. Requeued
 * payloads go to the left of the main list, oldest first, like new arrivals
 * (past QUEUE_MAX_LENGTH if need be: they were already in Redis' memory),
 * with their crash counts cleared and their ids back from the dead ids to the
 * queued ones; purged ones are dropped with their dead id. Either way the count of their
 * kind goes down (a kind's field is deleted at zero). Returns {taken, next
 * cursor, done (1 once the newest record was examined)}.
 *
 * Why a cursor from the oldest end: new dead letters arrive at the left, so
 * positions counted from the right stay put between chunks. The caller loops
 * until done; an interruption between chunks leaves every record either
 * still dead or requeued, never both nor neither, and a rerun from cursor 0
 * just re-examines what it kept. The taken records are removed by
 * overwriting them with a marker and one LREM from the right, which stops
 * after the last one: a chunk costs O(cursor + window), so a filtered run over
 * N dead letters costs O(N²/window) list steps in all (about 5 million for
 * 100,000, a few hundred ms); taking everything from the oldest end is
 * O(window) per chunk, with one LTRIM.
 */
const DEAD_LETTERS_TAKE = `#!lua flags=allow-oom
local action, cursor, window, kind = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local wanted = nil
if #ARGV > 4 then
  wanted = {}
  for i = 5, #ARGV do wanted[ARGV[i]] = true end
end
local length = redis.call('LLEN', KEYS[1])
local stop = length - 1 - cursor
if stop < 0 then return {0, cursor, 1} end
local start = math.max(0, stop - window + 1)
local records = redis.call('LRANGE', KEYS[1], start, stop)
local taken, payloads, counts, marker = {}, {}, {}, '\\0taken'
local crash_counts = redis.call('HLEN', KEYS[6]) > 0
for i = #records, 1, -1 do
  local ok, letter = pcall(cjson.decode, records[i])
  if not ok or type(letter) ~= 'table' then letter = {} end
  local letter_kind = type(letter.kind) == 'string' and letter.kind or 'unknown'
  local id = type(letter.id) == 'string' and letter.id or nil
  local payload = type(letter.payload) == 'string' and letter.payload or nil
  local match = (kind == '' or kind == letter_kind) and
    (wanted == nil or (id ~= nil and wanted[id] == true)) and
    (action == 'purge' or payload ~= nil)
  if match then
    taken[#taken + 1] = start + i - 1
    counts[letter_kind] = (counts[letter_kind] or 0) + 1
    if payload then
      if crash_counts then redis.call('HDEL', KEYS[6], redis.sha1hex(payload)) end
      if action == 'requeue' then payloads[#payloads + 1] = payload end
    end
    if id and redis.call('HDEL', KEYS[4], id) == 1 and action == 'requeue' then
      redis.call('SADD', KEYS[3], id)
    end
  end
end
if #taken == #records and stop == length - 1 then
  if start == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, start - 1) end
elseif #taken > 0 then
  for _, index in ipairs(taken) do redis.call('LSET', KEYS[1], index, marker) end
  redis.call('LREM', KEYS[1], -#taken, marker)
end
for i = 1, #payloads, 1000 do
  redis.call('LPUSH', KEYS[2], unpack(payloads, i, math.min(i + 999, #payloads)))
end
for counted, n in pairs(counts) do
  if redis.call('HINCRBY', KEYS[5], counted, -n) <= 0 then redis.call('HDEL', KEYS[5], counted) end
end
local done = 0
if start == 0 then done = 1 end
return {#taken, cursor + #records - #taken, done}
`;

/**
 * KEYS: queue, retry, dead, consumers, dead counts, stats, then for each
 * consumer to show its processing list and its heartbeat. ARGV: those
 * consumers' ids (the members of the consumers set, read just before; one no
 * longer registered is left out).
 * Everything `GET /admin/overview` and the consumer's queue gauges show, in
 * one read-only step (so it runs on a full Redis too) that touches no item but
 * the oldest queued and the oldest retried one: the lengths of the lists, the
 * oldest queued item, each registered consumer's processing length, heartbeat
 * TTL (ms, -2 once expired) and stored counter, the dead-letter counts and
 * stats hashes, and the oldest retried item. Returns {queued, retry, dead,
 * oldest item or false, {id, processing, ttl, stored}…, counts…, stats…,
 * oldest retried item or false}.
 */
const OVERVIEW = `#!lua flags=no-writes
local consumers = {}
for c = 1, #ARGV do
  local id = ARGV[c]
  if redis.call('SISMEMBER', KEYS[4], id) == 1 then
    consumers[#consumers + 1] = {
      id,
      redis.call('LLEN', KEYS[5 + 2 * c]),
      redis.call('PTTL', KEYS[6 + 2 * c]),
      redis.call('HGET', KEYS[6], 'stored:' .. id) or '0',
    }
  end
end
return {
  redis.call('LLEN', KEYS[1]),
  redis.call('LLEN', KEYS[2]),
  redis.call('LLEN', KEYS[3]),
  redis.call('LINDEX', KEYS[1], -1),
  consumers,
  redis.call('HGETALL', KEYS[5]),
  redis.call('HGETALL', KEYS[6]),
  redis.call('LINDEX', KEYS[2], -1),
}
`;

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

/** The raw reply of the keyed enqueue script: see ENQUEUE_ONCE. */
export type EnqueueOnceReply = -2 | 0 | [1 | 2 | 3, string];

/** The raw reply of the fetch script. */
export type FetchReply = -1 | [0 | 1, string[] | string] | [0] | [2];

declare module "ioredis" {
  interface RedisCommander<Context> {
    queueEnqueue(
      queue: string,
      queuedIds: string,
      deadline: number,
      maxLength: number,
      mode: "all" | "fit",
      count: number,
      ...payloadsThenIds: string[]
    ): Result<number, Context>;
    queueEnqueueOnce(
      queue: string,
      queuedIds: string,
      record: string,
      deadline: number,
      maxLength: number,
      payload: string,
      id: string,
      name: string,
      ttlSeconds: number,
    ): Result<EnqueueOnceReply, Context>;
    queueFetch(
      consumers: string,
      retry: string,
      queue: string,
      processing: string,
      consumerId: string,
      max: number,
      held: number,
      holdingElsewhere: "0" | "1",
    ): Result<FetchReply, Context>;
    queueAck(
      consumers: string,
      processing: string,
      deliveries: string,
      dead: string,
      queuedIds: string,
      deadIds: string,
      deadCounts: string,
      stats: string,
      retry: string,
      queue: string,
      consumerId: string,
      count: number,
      fromRetry: "0" | "1",
      oldestItem: string,
      next: number,
      heldAfter: number,
      storedCount: number,
      ...storedIdsThenDeadTriples: string[]
    ): Result<0 | 1 | Exclude<FetchReply, -1>, Context>;
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
      numberOfKeys: number,
      consumers: string,
      retry: string,
      dead: string,
      deliveries: string,
      queuedIds: string,
      deadIds: string,
      deadCounts: string,
      stats: string,
      ...processingAndHeartbeatKeysThenMaxCrashesNowAndIds: (string | number)[]
    ): Result<[number, number, number], Context>;
    queueHandBack(
      consumers: string,
      heartbeat: string,
      processing: string,
      queue: string,
      deliveries: string,
      stats: string,
      consumerId: string,
    ): Result<number, Context>;
    queueDeadLettersTake(
      dead: string,
      queue: string,
      queuedIds: string,
      deadIds: string,
      deadCounts: string,
      deliveries: string,
      action: "requeue" | "purge",
      cursor: number,
      window: number,
      kind: string,
      ...ids: string[]
    ): Result<[number, number, 0 | 1], Context>;
    queueOverview(
      numberOfKeys: number,
      queue: string,
      retry: string,
      dead: string,
      consumers: string,
      deadCounts: string,
      stats: string,
      ...processingAndHeartbeatKeysThenIds: string[]
    ): Result<OverviewReply, Context>;
  }
}

/**
 * The scripts called with their number of keys first (two keys per consumer).
 * ioredis' automatic pipelining in a cluster picks a command's node by its
 * first argument, taken as a key: these must bypass it (sent alone, they are
 * routed by their real keys).
 */
export const SCRIPTS_WITH_KEY_COUNT: readonly string[] = ["queueRecover", "queueOverview"];

/** Registers the queue's scripts as commands on `redis`; idempotent. */
export function defineQueueScripts(redis: RedisClient): void {
  redis.defineCommand("queueEnqueue", { numberOfKeys: 2, lua: ENQUEUE });
  redis.defineCommand("queueEnqueueOnce", { numberOfKeys: 3, lua: ENQUEUE_ONCE });
  redis.defineCommand("queueFetch", { numberOfKeys: 4, lua: FETCH });
  redis.defineCommand("queueAck", { numberOfKeys: 10, lua: ACK });
  redis.defineCommand("queueRegister", { numberOfKeys: 2, lua: REGISTER });
  redis.defineCommand("queueHeartbeat", { numberOfKeys: 2, lua: HEARTBEAT });
  // A varying number of keys (two per consumer): the caller passes the count first.
  redis.defineCommand("queueRecover", { lua: RECOVER });
  redis.defineCommand("queueHandBack", { numberOfKeys: 6, lua: HAND_BACK });
  redis.defineCommand("queueDeadLettersTake", { numberOfKeys: 6, lua: DEAD_LETTERS_TAKE });
  redis.defineCommand("queueOverview", { lua: OVERVIEW });
}
