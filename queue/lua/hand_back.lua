#!lua flags=allow-oom
-- A consumer's graceful exit: returns whatever it still holds to the
-- consuming end of the main list and unregisters it (dropping its
-- `stored:<id>` counter).
--
-- KEYS[1] consumers   the registered consumers' ids
-- KEYS[2] heartbeat   this consumer's heartbeat
-- KEYS[3] processing  this consumer's processing list
-- KEYS[4] queue       the main list
-- KEYS[5] deliveries  the crash counts, by SHA-1 of the item
-- KEYS[6] stats       the `stored` counters
-- ARGV[1] consumerId  this consumer's id
--
-- Returns how many items went back.
--
-- Why the right end and the crash counts cleared: the items are next out, in
-- their original order, and stay queued in the index. A graceful stop is no
-- crash, and a recovered item handed back would otherwise keep its count for
-- good (a count is cleared only when its item is acknowledged as taken from
-- the retry list, which a handed-back item no longer is).

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
