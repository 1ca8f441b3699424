#!lua
-- enqueue.lua for one user sent with an `Idempotency-Key`: pushes the user
-- unless the key was queued before, and records the key in the same step.
--
-- KEYS[1] queue        the main list
-- KEYS[2] queuedIds    the ids accepted and not yet stored
-- KEYS[3] record       the key's record: the id the key was first queued
--                      under, a space, and the SHA-1 of that user's name
-- ARGV[1] deadline     ms since the epoch, 0 for none
-- ARGV[2] maxLength    the most items the main list may hold
-- ARGV[3] payload      the user's envelope
-- ARGV[4] id           the user's id
-- ARGV[5] name         the user's trimmed name, whose SHA-1 the record keeps
-- ARGV[6] ttlSeconds   how long the record lives
--
-- Returns -2 when Redis ran the script after the deadline (nothing done;
-- includes/past_deadline.lua says why), 0 when the queue is full and the key
-- is new (nothing done), or {status, id}:
--   1  pushed under this call's id, with its record;
--   2  the key was queued before, for the same name, under that id (nothing
--      pushed);
--   3  the key was queued before for another name, under that id (nothing
--      pushed).
--
-- Why a seen key rewrites its record (same value, same expiry): a write of
-- this connection's own is what WAIT counts replicas for, so a 202 for a key
-- first pushed under a 503 "unconfirmed" waits, like a push, for that push to
-- be on enough replicas (a replica's stream is in order).

-- @include "includes/past_deadline.lua"

local fingerprint = redis.sha1hex(ARGV[5])
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
