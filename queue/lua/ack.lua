#!lua flags=allow-oom
-- Acknowledges the batch a consumer stored, records its dead letters and
-- updates the index, in one step; then, when asked, fetches the next batch.
--
-- KEYS[1]  consumers    the registered consumers' ids
-- KEYS[2]  processing   this consumer's processing list
-- KEYS[3]  deliveries   the crash counts, by SHA-1 of the item
-- KEYS[4]  dead         the dead letters
-- KEYS[5]  queuedIds    the ids accepted and not yet stored
-- KEYS[6]  deadIds      the buried ids and their dead letters
-- KEYS[7]  deadCounts   the dead letters' counts by kind
-- KEYS[8]  stats        the `stored` counters
-- KEYS[9]  retry        the items recovered from crashed consumers
-- KEYS[10] queue        the main list
-- ARGV[1]  consumerId   this consumer's id
-- ARGV[2]  count        how many items the batch holds
-- ARGV[3]  fromRetry    '1' when the batch is a recovered item, '0' otherwise
-- ARGV[4]  oldestItem   the batch's oldest item
-- ARGV[5]  next         the most items to fetch once acknowledged, 0 for none
-- ARGV[6]  heldAfter    the items the consumer still holds once this batch is
--                       acknowledged: the batch fetched while this one was
--                       stored, or 0
-- ARGV[7]  storedCount  s, how many ids were stored
-- ARGV[8…]              the s ids stored, then for each dead letter three
--                       values: its user id ('' when unknown), its kind, its
--                       JSON record
--
-- Returns 0 when the consumer is fenced (nothing acknowledged, nothing
-- fetched); otherwise 1 when next is 0, or else the next batch exactly as
-- fetch.lua returns it for a consumer holding `heldAfter` items.
--
-- Acknowledges the oldest `count` items of the processing list (the batch
-- just handled: each fetch pushes at the left, so the oldest batch is at the
-- right) and records its dead letters, in one step. A fenced consumer
-- acknowledges nothing: its items were already handed to others, who will
-- bury them too.
--
-- The batch's oldest item must be the one at the right end: otherwise this
-- is a repeat of an acknowledgement that ran but whose reply was lost (a
-- command timed out client-side and ran when Redis resumed, say), and it
-- acknowledges nothing, so no letter is buried twice and, above all, nothing
-- else is trimmed: the list may already hold the next batch, fetched while
-- this one was stored, and trimming `count` items again would drop its
-- oldest unstored. (The API's payloads carry their user's id, so two of them
-- are never the same string; only the same payload pushed twice can be, and
-- then either copy carries the whole of what the other does.)
--
-- Why the fetch rides on the acknowledgement: the consumer needs its next
-- batch either way, and one script call instead of two is one round trip,
-- one EVALSHA and one `MULTI … EXEC` in the append-only file less per batch
-- (per user, in single mode). The fetch part is fetch.lua's, repeat rule
-- included: a call repeated after a lost reply acknowledges nothing more and
-- returns the batch that reply carried.
--
-- The index, in the same step: a stored id leaves the queued set (this runs
-- only after PostgreSQL committed, so from the moment the id is gone the row
-- is there: the status lookup reads the index first and PostgreSQL second,
-- and can never miss a user between the two); a buried id moves from the
-- queued set to the dead ids with its record, but only if it was queued (an
-- item pushed without the index, the course's raw LPUSH, leaves nothing
-- behind). The stored ids leave first, so an id both stored and buried in
-- one batch (an id clash) reads as stored, which it is. Each dead letter
-- counts once under its kind, and `stored` counts the rows acknowledged.
--
-- `allow-oom`: a full Redis (`maxmemory-policy noeviction`) refuses writes,
-- but the consumer's draining is what frees memory, so its scripts still run.

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

-- @include "includes/take.lua"
