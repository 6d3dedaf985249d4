-- reserve: claims an in-flight slot for a task no caller asked for (a pool refill).
-- KEYS: the target prelude's seven keys.
-- ARGV[1] claim id   ARGV[2] its lease end (ms)   ARGV[3] now (ms)
-- Returns: {1}.
touch(tonumber(ARGV[3]))
redis.call('ZADD', inflight, tonumber(ARGV[2]), ARGV[1])
incr('new_tasks', 1)
incr('refills', 1)
return {1}
