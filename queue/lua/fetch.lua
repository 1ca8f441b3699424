#!lua flags=allow-oom
-- Moves up to `max` items into the consumer's processing list.
--
-- KEYS[1] consumers         the registered consumers' ids
-- KEYS[2] retry             the items recovered from crashed consumers
-- KEYS[3] queue             the main list
-- KEYS[4] processing        this consumer's processing list
-- ARGV[1] consumerId        this consumer's id
-- ARGV[2] max               the most items to take
-- ARGV[3] held              how many items the consumer knows its
--                           processing list holds
-- ARGV[4] holdingElsewhere  '1' when it holds a batch in another shard's
--                           list, '0' otherwise
--
-- Returns -1 when the consumer is no longer registered (its heartbeat expired
-- and its work was recovered: it must not take more under that id);
-- otherwise {1, item} for one recovered item (suspects are retried one at a
-- time so a poison item cannot take a batch down with it), {2} when a
-- recovered item waits and this consumer holds something (below), or
-- {0, items…} with up to max items from the main list, newest first, now
-- also in the processing list.
--
-- The items go into the processing list oldest at the right, the end the
-- acknowledgement trims from. A consumer holds the batch it is storing (at
-- the right) and those it took ahead (to the left), fetched while the first
-- is being inserted, or taken in the same move as the first, whose oldest
-- items the first batch then is; ARGV[3] says how many items it holds.
-- (Oldest at the right also makes a hand-back, which puts the list back at
-- the front of the queue, keep FIFO.)
-- A recovered item is handed only to a consumer holding nothing, so a suspect
-- is never held beside other items: a fetch made while holding a batch (in
-- this shard's list or another's) gets nothing, {2}, when the retry list is
-- not empty, and the consumer fetches again once its batch is acknowledged.
--
-- The consumer says how many items it holds; anything beyond that belongs to
-- a fetch whose reply it never got (the command timed out client-side but ran
-- when Redis resumed, or Redis died between its AOF write and the reply) and
-- which it is now repeating: those same items are returned again, newest
-- first. Stacking a further batch on them would make an acknowledgement,
-- which trims by count from the oldest end, drop a batch unstored. (A re-sent
-- recovered item comes back as {0, item}, so its crash count is not cleared;
-- it only matters if it crashes consumers again.)
--
-- `allow-oom`: a full Redis (`maxmemory-policy noeviction`) refuses writes,
-- but the consumer's draining is what frees memory, so its scripts still run.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
local retry, queue, processing = KEYS[2], KEYS[3], KEYS[4]
local max, held, elsewhere = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'

-- @include "includes/take.lua"
