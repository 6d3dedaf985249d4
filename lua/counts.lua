-- counts: pool, in-flight and waiting figures of a target now, after forgetting what expired.
-- Safe to run twice (reaping twice changes nothing more), so it records no reply.
-- KEYS, ARGV[1..6]: the target prelude's.
-- Returns: {pooled, in_flight, waiting, woken...}.
local woken = reap()
drop_stale()
return extend({redis.call('ZCARD', pool), redis.call('ZCARD', inflight),
  redis.call('ZCARD', waiters)}, woken)
