#!lua
-- Pushes users at the left of the main list, in order, and adds their ids to
-- the queued set.
--
-- KEYS[1] queue      the main list
-- KEYS[2] queuedIds  the ids accepted and not yet stored
-- ARGV[1] deadline   ms since the epoch, 0 for none
-- ARGV[2] maxLength  the most items the main list may hold
-- ARGV[3] count      n, how many users
-- ARGV[4] whole      1: all n or none; 0: as many of the first as fit
-- ARGV[5…]           the n payloads, then their n user ids
--
-- Returns how many were pushed, or -2 when Redis ran the script after the
-- deadline (nothing pushed; includes/past_deadline.lua says why). With
-- whole = 0 that is as many of the first as fit: the API's grouped pushes,
-- each request refused or accepted as if pushed alone. With whole = 1 it is n
-- or 0: one shard's part of a `POST /users/batch`, which the bound refuses as
-- a whole rather than splitting a client's batch.
--
-- Why the ids travel beside the payloads: Redis decodes no JSON on the hot
-- path, and the index entry exists from the moment the push does (the API
-- answers 202 only after this script ran), so a `GET /users/<id>` after the
-- 202 always finds the user. This SADD is the index's whole cost on the
-- ingest path, mostly a second command written to the append-only file.

-- @include "includes/past_deadline.lua"

local count = tonumber(ARGV[3])
local room = tonumber(ARGV[2]) - redis.call('LLEN', KEYS[1])
local n = math.max(math.min(count, room), 0)
if ARGV[4] == '1' and n < count then return 0 end
for i = 5, 4 + n, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, 4 + n)))
end
local ids = 5 + count
for i = ids, ids + n - 1, 1000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 999, ids + n - 1)))
end
return n
