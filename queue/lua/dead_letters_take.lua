#!lua flags=allow-oom
-- One chunk of a requeue or a purge of dead letters: examines the `window`
-- oldest dead letters not yet examined and takes those that match, in one
-- atomic step. A requeued payload goes to the left of the main list like a
-- new arrival (past QUEUE_MAX_LENGTH if need be: it was already in Redis'
-- memory), its crash count cleared and its id queued again; a purged one is
-- dropped with its dead id. Either way its kind's count goes down.
--
-- KEYS[1] dead        the dead letters
-- KEYS[2] queue       the main list
-- KEYS[3] queuedIds   the ids accepted and not yet stored
-- KEYS[4] deadIds     the buried ids and their dead letters
-- KEYS[5] deadCounts  the dead letters' counts by kind
-- KEYS[6] deliveries  the crash counts, by SHA-1 of the item
-- ARGV[1] action      'requeue' or 'purge'
-- ARGV[2] cursor      the records already examined and kept, counted from
--                     the oldest end
-- ARGV[3] window      how many records to examine
-- ARGV[4] kind        only letters of this kind, '' for any
-- ARGV[5…]            only these letters (none for any): each a user id, or
--                     the whole record of a letter that has none (an item
--                     that was never an envelope), matched as exact text
--
-- Returns {taken, next cursor, done}, done 1 once the newest record was
-- examined, else 0.
--
-- Why a cursor from the oldest end: new dead letters arrive at the left, so
-- positions counted from the right stay put between chunks. The caller loops
-- until done; an interruption between chunks leaves every record either
-- still dead or taken, never both nor neither, and a rerun from cursor 0 only
-- re-examines what it kept. Chunks keep each step short for Redis' other
-- clients (`dead_letters.ts` gives the cost).

local action, cursor, window, kind = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local wanted = nil
if #ARGV > 4 then
  wanted = {}
  for i = 5, #ARGV do wanted[ARGV[i]] = true end
end
local length = redis.call('LLEN', KEYS[1])
local stop = length - 1 - cursor
if stop < 0 then return {0, cursor, 1} end
local start = math.max(0, stop - window + 1)
local records = redis.call('LRANGE', KEYS[1], start, stop)
local taken, payloads, counts, marker = {}, {}, {}, '\0taken'
local crash_counts = redis.call('HLEN', KEYS[6]) > 0
for i = #records, 1, -1 do
  local ok, letter = pcall(cjson.decode, records[i])
  if not ok or type(letter) ~= 'table' then letter = {} end
  local letter_kind = type(letter.kind) == 'string' and letter.kind or 'unknown'
  local id = type(letter.id) == 'string' and letter.id or nil
  local payload = type(letter.payload) == 'string' and letter.payload or nil
  local match = (kind == '' or kind == letter_kind) and
    (wanted == nil or (id ~= nil and wanted[id] == true) or
      (id == nil and wanted[records[i]] == true)) and
    (action == 'purge' or payload ~= nil)
  if match then
    taken[#taken + 1] = start + i - 1
    counts[letter_kind] = (counts[letter_kind] or 0) + 1
    if payload then
      if crash_counts then redis.call('HDEL', KEYS[6], redis.sha1hex(payload)) end
      if action == 'requeue' then payloads[#payloads + 1] = payload end
    end
    if id and redis.call('HDEL', KEYS[4], id) == 1 and action == 'requeue' then
      redis.call('SADD', KEYS[3], id)
    end
  end
end
if #taken == #records and stop == length - 1 then
  if start == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, start - 1) end
elseif #taken > 0 then
  -- Marked, then removed by one LREM from the right, which stops after the
  -- last: O(cursor + window) per chunk, where taking all is one LTRIM.
  for _, index in ipairs(taken) do redis.call('LSET', KEYS[1], index, marker) end
  redis.call('LREM', KEYS[1], -#taken, marker)
end
for i = 1, #payloads, 1000 do
  redis.call('LPUSH', KEYS[2], unpack(payloads, i, math.min(i + 999, #payloads)))
end
for counted, n in pairs(counts) do
  if redis.call('HINCRBY', KEYS[5], counted, -n) <= 0 then redis.call('HDEL', KEYS[5], counted) end
end
local done = 0
if start == 0 then done = 1 end
return {#taken, cursor + #records - #taken, done}
