-- The taking step of fetch.lua, shared with ack.lua's fetch of the next
-- batch; run once the consumer is known to be registered.
--
-- Reads   the locals `retry`, `queue`, `processing` (keys), `max`, `held`
--         (numbers) and `elsewhere` (boolean).
-- Returns the script's reply, as fetch.lua describes it. Items taken from
-- the main list pass through `with_id` on their way.

-- @include "includes/with_id.lua"

local unknown = redis.call('LLEN', processing) - held
-- The items of a fetch whose reply was lost, again (fetch.lua says why). A
-- recovered one comes back as {0, item}, so its crash count stays: that only
-- matters if it crashes consumers again.
if unknown > 0 then
  return {0, redis.call('LRANGE', processing, 0, unknown - 1)}
end
if held > 0 or elsewhere then
  if redis.call('LLEN', retry) > 0 then return {2} end
else
  local retried = redis.call('RPOPLPUSH', retry, processing)
  if retried then return {1, retried} end
end
local items = redis.call('LRANGE', queue, -max, -1)
local n = #items
if n == 0 then return {0} end
redis.call('LTRIM', queue, 0, -n - 1)
for i = 1, n do items[i] = with_id(items[i], i) end
local oldest_first = {}
for i = n, 1, -1 do oldest_first[#oldest_first + 1] = items[i] end
for i = 1, n, 1000 do
  redis.call('LPUSH', processing, unpack(oldest_first, i, math.min(i + 999, n)))
end
return {0, items}
