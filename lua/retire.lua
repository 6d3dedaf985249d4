-- retire: forgets a target nobody needs any more (issue 8: per-target state must shrink). Its
-- keys go when, atomically, it has nothing pooled (after dropping what expired), nothing in
-- flight (after reaping dead instances' claims), no waiter, no undelivered mail, no reusable
-- answer cached, no leader and no follower, and its last use is at or before ARGV[2].
-- Safe to run twice (the second run finds no keys and retires nothing more), and safe against a
-- caller arriving at the same moment: Redis runs scripts one at a time, so the caller's script
-- runs either before (it marks the target used, or leaves work behind: kept) or after (it
-- starts the target afresh from nothing; its instance registers it again, see note_target).
-- A target whose keys are already gone (Redis restarted empty) counts as retired.
-- KEYS: the target prelude's seven keys, then
-- KEYS[8] cached reusable answer   KEYS[9] its lock   KEYS[10] fence counter
-- KEYS[11] followers (ZSET by lease end: only live ones count)
-- ARGV[1] now (ms)   ARGV[2] idle_before: the latest last use that may retire (ms)
-- ARGV[3] mail ttl (ms)
-- Returns: {1} retired | {0, woken...} kept; `woken` got passed-on mail while reaping.
local now, idle_before = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', stats, 'last') or '0')
if last > idle_before then return {0} end
local woken = reap(now, '1', tonumber(ARGV[3]))
drop_stale(now)
local busy = redis.call('ZCARD', pool) + redis.call('ZCARD', waiters)
  + redis.call('ZCARD', wlease) + redis.call('ZCARD', inflight)
  + redis.call('HLEN', mbox) + redis.call('ZCARD', mlease)
  + redis.call('EXISTS', KEYS[8]) + redis.call('EXISTS', KEYS[9])
  + redis.call('ZCOUNT', KEYS[11], now, '+inf')
if busy > 0 or #woken > 0 then return {0, unpack(woken)} end
redis.call('DEL', pool, waiters, wlease, inflight, mbox, mlease, stats, KEYS[8], KEYS[9],
  KEYS[10], KEYS[11])
return {1}
