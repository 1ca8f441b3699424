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
-- Returns -1 when the consumer is fenced (it must take nothing more under
-- that id); otherwise {1, item}, one recovered item, for a consumer holding
-- nothing; {2}, nothing, when a recovered item waits and the consumer holds
-- something; or {0, items…}, newest first, now also in the processing list:
-- up to max items of the main list, or again those of a fetch whose reply
-- was lost.
--
-- Why `held`: items go in at the left, so the processing list holds the
-- consumer's batches oldest at the right, the end an acknowledgement trims
-- by count (and from which a hand-back keeps FIFO). Items beyond the `held`
-- the consumer knows of came from a fetch whose reply it never got; a new
-- batch stacked on them would have an acknowledgement trim them unstored, so
-- they are returned again instead. A recovered item, a suspect, is only ever
-- held alone, so a poison item that crashes the process makes no other item
-- a suspect.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
local retry, queue, processing = KEYS[2], KEYS[3], KEYS[4]
local max, held, elsewhere = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'

-- @include "includes/take.lua"
