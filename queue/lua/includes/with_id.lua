-- Gives an id to an item the course's producer pushed; included by take.lua.
--
-- Reads   the local `processing` (the processing list's key) as an upvalue.
-- Defines the local function `with_id(item, i)`, `i` the item's place in the
-- take. Returns the item as it is, unless it is exactly `{"name": <string>}`
-- (what the course's `LPUSH users` and `redis-cli LPUSH users
-- '{"name":"Ada"}'` push), which it returns as an envelope with a fresh
-- UUIDv7 and `enqueued_at` set to now (when it was pushed is not known).
--
-- Why at the take, in the same script as the move into the processing list:
-- the rewritten item is what the processing list holds, so a redelivery
-- (recovery, a repeated fetch, a hand-back) carries the same id, and the
-- insert, idempotent by id, stays exactly once. Only an item that does not
-- start as the API's envelopes do (`{"id":"`) is decoded, so the API's items
-- cost one prefix comparison. Anything else stays as it is, and the consumer
-- buries it with its reason.
--
-- The id: the UUIDv7 layout (48 bits of Redis' clock in ms, version 7, the
-- RFC 9562 variant) with its 74 other bits from SHA-1 over the processing
-- list's name, Redis' clock in µs, the item's place in the take and the item.
-- The processing list belongs to one consumer of one shard, and one
-- consumer's takes are one round trip apart, so no two items of the whole
-- deployment hash the same input; scripts may not call a random source whose
-- outcome replicas could not repeat, and their effects (the rewritten item)
-- are what is replicated.

local function with_id(item, i)
  if string.sub(item, 1, 7) == '{"id":"' then return item end
  local ok, user = pcall(cjson.decode, item)
  if not ok or type(user) ~= 'table' or type(user.name) ~= 'string' then return item end
  for field in pairs(user) do
    if field ~= 'name' then return item end
  end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local h = redis.sha1hex(processing .. '|' .. now[1] .. '.' .. now[2] .. '|' .. i .. '|' .. item)
  local variant = string.sub('89ab', tonumber(string.sub(h, 4, 4), 16) % 4 + 1, tonumber(string.sub(h, 4, 4), 16) % 4 + 1)
  local id = string.format('%08x-%04x-7%s-%s%s-%s', math.floor(ms / 65536), ms % 65536,
    string.sub(h, 1, 3), variant, string.sub(h, 5, 7), string.sub(h, 8, 19))
  return '{"id":"' .. id .. '","name":' .. cjson.encode(user.name) .. ',"enqueued_at":' .. string.format('%d', ms) .. '}'
end
