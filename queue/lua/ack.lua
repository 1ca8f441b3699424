#!lua flags=allow-oom
-- Acknowledges the batch a consumer stored, buries its dead letters and
-- updates the status index, in one step; then, when asked, fetches the next
-- batch as fetch.lua does.
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
--                       acknowledged (the batch fetched while it was stored)
-- ARGV[7]  storedCount  s, how many ids were stored
-- ARGV[8…]              the s ids stored, then three values per dead letter:
--                       its user id ('' when unknown), its kind, its record
--
-- Returns 0 when the consumer is fenced (nothing acknowledged, nothing
-- fetched); otherwise 1 when next is 0, else the next batch as fetch.lua
-- returns it for a consumer holding `heldAfter` items.
--
-- Why the oldest item is checked: each fetch pushes at the left, so the batch
-- is the `count` items at the right end. When the item there is not the
-- batch's oldest, this call repeats one whose reply was lost, and trimming
-- again would drop the oldest of the batch fetched meanwhile, so it
-- acknowledges nothing (two items are the same string only when one payload
-- was pushed twice, and then either copy stands for the other). The fetch
-- rides on the acknowledgement because the consumer needs it either way: one
-- script call, round trip and AOF entry per batch instead of two.

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
  -- After the stored ids, so an id both stored and buried (a clash) reads as
  -- stored; only a queued id has an entry to move (a raw LPUSH has none).
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
