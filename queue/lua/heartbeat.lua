#!lua flags=allow-oom
-- Extends a consumer's heartbeat.
--
-- KEYS[1] consumers   the registered consumers' ids
-- KEYS[2] heartbeat   this consumer's heartbeat
-- ARGV[1] consumerId  this consumer's id
-- ARGV[2] ttlMs       how long the heartbeat lives from now, in ms
--
-- Returns 1, or 0 (and extends nothing) when the consumer was fenced in the
-- meantime: its work was recovered, and it must re-register under a new id.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 1
