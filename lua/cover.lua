-- cover: after a dead instance's claims expired, waiters may outnumber running tasks. Claims
-- as many new tasks as are missing (promise 3 after a crash), up to the candidates given.
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)   ARGV[2] claim lease end (ms)   ARGV[3] poolable   ARGV[4] mail ttl (ms)
-- ARGV[5..] candidate claim ids
-- Returns: {n, woken...}: start tasks under the first n candidates; tell the woken waiters.
local now = tonumber(ARGV[1])
touch(now)
local woken = reap(now, ARGV[3], tonumber(ARGV[4]))
local missing = redis.call('ZCARD', waiters) - redis.call('ZCARD', inflight)
local n = 0
for i = 5, #ARGV do
  if n >= missing then break end
  redis.call('ZADD', inflight, tonumber(ARGV[2]), ARGV[i])
  n = n + 1
end
incr('new_tasks', n)
return {n, unpack(woken)}
