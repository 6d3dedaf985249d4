-- reserve: claims in-flight slots for tasks no caller asked for (pool refills), as many as the
-- pool lacks of ARGV[7] answers, counted and claimed in one step so two instances topping up
-- at once never both start the same shortfall. Tasks promised to waiting
-- callers will not reach the pool, so only the rest of those in flight count as coming.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] the pool's size   ARGV[8..] candidate claim ids
-- Returns: {n, adopted 1..n, woken...}: start refills under the first n candidates (each polls
--          the provider task it adopted, when not ''); tell the woken waiters.
local r = replay()
if r then return r end
touch()
local woken = reap()
drop_stale()
local coming = math.max(0, redis.call('ZCARD', inflight) - redis.call('ZCARD', waiters))
local missing = tonumber(ARGV[7]) - redis.call('ZCARD', pool) - coming
local n, adoptions = claim_up_to(missing, 8)
incr('refills', n)
return done(extend(extend({n}, adoptions), woken))
