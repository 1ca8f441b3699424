-- The pushes' first step, included by enqueue.lua and enqueue_once.lua.
--
-- Reads   ARGV[1] deadline  ms since the epoch, 0 for none
-- Defines the local `deadline`.
-- Returns -2 from the script when the deadline has passed by Redis' clock;
-- otherwise the script goes on.
--
-- Why a deadline: a client that gives up waiting (the API answers 503 after
-- REDIS_TIMEOUT_MS) cannot take back a command it sent. A frozen Redis runs
-- such commands once it resumes, which would queue users told 503, twice if
-- they retried; with a deadline before the client's timeout, a late push does
-- nothing. It is read on Redis' clock (TIME), so the API's clock and Redis'
-- must agree to well within the margin.

local deadline = tonumber(ARGV[1])
if deadline > 0 then
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > deadline then return -2 end
end
