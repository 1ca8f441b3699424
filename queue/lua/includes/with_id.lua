-- Gives an id to an item the course's producer pushed; included by take.lua.
--
-- Reads   the local `processing` (the processing list's key) as an upvalue.
-- Defines the local function `with_id(item, i)`, `i` the item's place in the
-- take. Returns the item as it is, unless it is exactly `{"name": <string>}`,
-- which it returns as an envelope with a fresh UUIDv7 and `enqueued_at` now
-- (when it was pushed is not known).
--
-- Why at the take, in the script that moves the item into the processing
-- list: the rewritten item is what the list holds, so every redelivery
-- carries the same id and the insert, idempotent by id, stays exactly once.
-- An item that starts as the API's envelopes do (`{"id":"`) costs one prefix
-- comparison; anything else that is not a bare name stays as it is, and the
-- consumer buries it with its reason.

local function with_id(item, i)
  if string.sub(item, 1, 7) == '{"id":"' then return item end
  local ok, user = pcall(cjson.decode, item)
  if not ok or type(user) ~= 'table' or type(user.name) ~= 'string' then return item end
  for field in pairs(user) do
    if field ~= 'name' then return item end
  end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  -- UUIDv7's layout (48 bits of ms, version 7, the RFC 9562 variant), its 74
  -- other bits from a hash, as a script may not call a random source its
  -- replicas could not repeat. One consumer's takes of one shard are a round
  -- trip apart, so no two items of the deployment hash the same input.
  local h = redis.sha1hex(processing .. '|' .. now[1] .. '.' .. now[2] .. '|' .. i .. '|' .. item)
  local variant = string.sub('89ab', tonumber(string.sub(h, 4, 4), 16) % 4 + 1, tonumber(string.sub(h, 4, 4), 16) % 4 + 1)
  local id = string.format('%08x-%04x-7%s-%s%s-%s', math.floor(ms / 65536), ms % 65536,
    string.sub(h, 1, 3), variant, string.sub(h, 5, 7), string.sub(h, 8, 19))
  return '{"id":"' .. id .. '","name":' .. cjson.encode(user.name) .. ',"enqueued_at":' .. string.format('%d', ms) .. '}'
end
