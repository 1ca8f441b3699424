#!lua flags=allow-oom
-- Recovers the work of every consumer given that is still registered and
-- whose heartbeat expired: counts one crash against each item it held and
-- moves the item to the retry list, or, once it has crashed `maxCrashes`
-- consumers, to the dead letters (kind `consumer_crashed`, its id moved from
-- the queued ids to the dead ones); then unregisters the consumer (dropping
-- its `stored:<id>` counter).
--
-- KEYS[1] consumers   the registered consumers' ids
-- KEYS[2] retry       the items recovered from crashed consumers
-- KEYS[3] dead        the dead letters
-- KEYS[4] deliveries  the crash counts, by SHA-1 of the item
-- KEYS[5] queuedIds   the ids accepted and not yet stored
-- KEYS[6] deadIds     the buried ids and their dead letters
-- KEYS[7] deadCounts  the dead letters' counts by kind
-- KEYS[8] stats       the `stored` counters
-- KEYS[9…]            for each consumer to examine, its processing list and
--                     its heartbeat
-- ARGV[1] maxCrashes  how many crashed consumers an item may have been with
--                     before it is buried
-- ARGV[2] now         the time, ISO 8601, for the dead letters' `dead_at`
-- ARGV[3…]            those consumers' ids, in the order of their keys
--
-- Returns {recovered, buried, consumers}: the items moved to the retry list,
-- the items buried, the consumers unregistered.
--
-- Why the caller passes the consumers' keys: a script must declare every key
-- it touches (all of one shard's hash slot), so it cannot derive them from
-- the set's members inside Redis. The caller reads the members first; this
-- script re-checks membership and the expired heartbeat atomically with the
-- moves, and a consumer registered in between, not given, is seen by the
-- next round.

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
        -- Decoded only for its id: rare, so the JSON decoding is affordable.
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
