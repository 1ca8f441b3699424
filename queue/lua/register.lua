#!lua flags=allow-oom
-- Registers a consumer and starts its heartbeat.
--
-- KEYS[1] consumers   the registered consumers' ids
-- KEYS[2] heartbeat   this consumer's heartbeat
-- ARGV[1] consumerId  this consumer's id
-- ARGV[2] ttlMs       how long the heartbeat lives, in ms
--
-- Returns 1.

redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 1
