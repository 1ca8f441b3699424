#!lua
-- enqueue.lua for users sent with an `Idempotency-Key` (one user of
-- `POST /users`, or every user of a `POST /users/batch`): pushes them, all or
-- none, unless the key was queued before, and records the key in the same
-- step.
--
-- KEYS[1] queue        the main list
-- KEYS[2] queuedIds    the ids accepted and not yet stored
-- KEYS[3] record       the key's record: the ids the key was first queued
--                      under, in order, each followed by a space, then the
--                      SHA-1 of those users' names joined by NUL
-- ARGV[1] deadline     ms since the epoch, 0 for none
-- ARGV[2] maxLength    the most items the main list may hold
-- ARGV[3] ttlSeconds   how long the record lives
-- ARGV[4] count        n, how many users
-- ARGV[5…]             the n envelopes, then their n ids, then their n
--                      trimmed names
--
-- Returns -2 when Redis ran the script after the deadline (nothing done;
-- includes/past_deadline.lua says why), 0 when the n users do not fit in the
-- queue and the key is new (nothing done), or {status, ids}, the ids joined
-- by spaces:
--   1  pushed under this call's ids, with its record;
--   2  the key was queued before, for the same names, under those ids
--      (nothing pushed);
--   3  the key was queued before for other names, under those ids (nothing
--      pushed).
--
-- Why NUL joins the names: a name never holds one (the API refuses it), so
-- two different lists of names never join to the same text, and a single
-- user's fingerprint is the SHA-1 of its name alone, as a batch of one's is.
--
-- Why a seen key rewrites its record (same value, same expiry): a write of
-- this connection's own is what WAIT counts replicas for, so a 202 for a key
-- first pushed under a 503 "unconfirmed" waits, like a push, for that push to
-- be on enough replicas (a replica's stream is in order).

-- @include "includes/past_deadline.lua"

local count = tonumber(ARGV[4])
local ids = 5 + count
local fingerprint = redis.sha1hex(table.concat(ARGV, '\0', ids + count, ids + 2 * count - 1))
local seen = redis.call('GET', KEYS[3])
if seen then
  redis.call('SET', KEYS[3], seen, 'KEEPTTL')
  local queuedAs = string.sub(seen, 1, -42)
  if string.sub(seen, -40) == fingerprint then return {2, queuedAs} end
  return {3, queuedAs}
end
if redis.call('LLEN', KEYS[1]) + count > tonumber(ARGV[2]) then return 0 end
for i = 5, ids - 1, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, ids - 1)))
end
for i = ids, ids + count - 1, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, ids + count - 1)))
end
local queuedAs = table.concat(ARGV, ' ', ids, ids + count - 1)
redis.call('SET', KEYS[3], queuedAs .. ' ' .. fingerprint, 'EX', ARGV[3])
return {1, queuedAs}
