#!lua
-- Takes `cost` users from one client's allowance, or refuses them all: the
-- generic cell rate algorithm (GCRA), a token bucket kept as one number, the
-- bucket's theoretical arrival time (TAT): when it would be empty again had
-- every user been sent at exactly the rate. A request fits while the TAT it
-- would leave is at most `burst` intervals ahead of now.
--
-- KEYS[1] bucket      the client's TAT, in µs since the epoch on Redis' clock
-- ARGV[1] intervalUs  µs per user: 1e6 / the rate in users per second
-- ARGV[2] burst       the most users the client may send at once
-- ARGV[3] cost        the users of this request (1, or a batch's)
--
-- Returns {allowed, remaining, resetUs, retryUs}: allowed 1 (taken) or 0
-- (refused, nothing taken); the users the client may still send now; µs
-- until its allowance is whole again; when refused, µs until this cost fits.
--
-- Why Redis' clock and one script: every API replica reads and moves the same
-- TAT in one step, so the rate holds over all of them together, whatever
-- their clocks say. The key expires once the bucket is whole, so an idle
-- client costs nothing.

local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local after = tat + tonumber(ARGV[3]) * interval
if after - now > tolerance then
  return {0, math.floor((tolerance - (tat - now)) / interval), math.ceil(tat - now),
    math.ceil(after - now - tolerance)}
end
-- '%.0f': tostring would write a number this large in Lua's short %.14g form.
redis.call('SET', KEYS[1], string.format('%.0f', after), 'PX', math.ceil((after - now) / 1000))
return {1, math.floor((tolerance - (after - now)) / interval), math.ceil(after - now), 0}
