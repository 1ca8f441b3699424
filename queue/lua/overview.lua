#!lua flags=no-writes
-- Everything `GET /admin/overview` and the consumer's queue gauges show, in
-- one read-only step.
--
-- KEYS[1] queue       the main list
-- KEYS[2] retry       the items recovered from crashed consumers
-- KEYS[3] dead        the dead letters
-- KEYS[4] consumers   the registered consumers' ids
-- KEYS[5] deadCounts  the dead letters' counts by kind
-- KEYS[6] stats       the `stored` counters
-- KEYS[7…]            for each consumer to show, its processing list and its
--                     heartbeat
-- ARGV[1…]            those consumers' ids, in the order of their keys (one
--                     no longer registered is left out)
--
-- Returns {queued, retry, dead, oldest item or false, {id, processing, ttl,
-- stored}…, counts…, stats…, oldest retried item or false}: the lists'
-- lengths, the oldest queued item, each registered consumer's processing
-- length, heartbeat TTL (ms, -2 once expired) and stored counter, the
-- dead-letter counts and stats hashes (field, value, …), and the oldest
-- retried item.
--
-- Why `no-writes` and so few reads: it runs on a full Redis too, and it
-- touches no item but the oldest queued and retried ones, so it is cheap
-- whatever the backlog. Why the caller passes the consumers' keys:
-- recover.lua.

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
