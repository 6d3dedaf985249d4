-- arrive: one caller of a single-use target. Takes a pooled answer, or waits for an in-flight
-- task that no earlier waiter has spoken for, or claims a new task (promises 1-3), atomically.
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)            ARGV[2] min_expiry: now + min_remaining (ms)
-- ARGV[3] waiter id           ARGV[4] waiter lease end (ms)
-- ARGV[5] claim id to use if a task must start      ARGV[6] claim lease end (ms)
-- ARGV[7] poolable ('1'/'0')  ARGV[8] mail ttl (ms)
-- Returns: {1, answer json} pooled | {2, woken...} wait | {3, woken...} start a task under ARGV[5].
--          `woken`: waiters that got passed-on mail while reaping; their instances must be told.
local now, min_expiry, mail_ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[8])
touch(now)
local woken = reap(now, ARGV[7], mail_ttl)
drop_stale(min_expiry)
local top = redis.call('ZRANGE', pool, 0, 0)[1]
if top then
  redis.call('ZREM', pool, top)
  incr('pool_hits', 1)
  return {1, top, unpack(woken)}
end
local covered = redis.call('ZCARD', waiters) < redis.call('ZCARD', inflight)
redis.call('ZADD', waiters, now, ARGV[3])
redis.call('ZADD', wlease, tonumber(ARGV[4]), ARGV[3])
if covered then
  incr('waits_served', 1)
  return {2, unpack(woken)}
end
redis.call('ZADD', inflight, tonumber(ARGV[6]), ARGV[5])
incr('new_tasks', 1)
return {3, unpack(woken)}
