-- counts: pool, in-flight and waiting figures of a target now, after forgetting what expired.
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)   ARGV[2] min_expiry (ms)   ARGV[3] poolable ('1'/'0')   ARGV[4] mail ttl (ms)
-- Returns: {pooled, in_flight, waiting, woken...}.
local now = tonumber(ARGV[1])
local woken = reap(now, ARGV[3], tonumber(ARGV[4]))
drop_stale(tonumber(ARGV[2]))
return {redis.call('ZCARD', pool), redis.call('ZCARD', inflight), redis.call('ZCARD', waiters),
  unpack(woken)}
