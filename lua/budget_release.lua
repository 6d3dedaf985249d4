-- budget_release: gives back lease ARGV[6] (its task ended) and tells waiters. Only that id is
-- removed, so a replay or a late run never frees another holder's thread; a second run finds
-- nothing and changes nothing. Also withdraws a waiter of that id (an acquire given up).
-- Returns {1 removed | 0 it was not there (lapsed, or released before), leases}.
local id = ARGV[6]
reap()
local removed = redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
redis.call('ZREM', KEYS[5], id)
if removed == 1 then redis.call('PUBLISH', ARGV[5], '1') end
return {removed, redis.call('ZCARD', KEYS[1])}
