-- retire: forgets a target nobody needs any more (every page is a target: per-target state must
-- shrink again). Its keys go when, atomically, it has nothing pooled (after dropping what
-- expired), nothing in flight (after reaping dead instances' claims), no waiter, no undelivered
-- mail, no reusable answer cached, no leader and no follower, and its last use is at or before
-- now - ARGV[7].
-- Safe to run twice (the second run finds no keys and retires nothing more), and safe against a
-- caller arriving at the same moment: Redis runs scripts one at a time, so the caller's script
-- runs either before (it marks the target used, or leaves work behind: kept) or after (it
-- starts the target afresh from nothing; its instance registers it again, see note_target).
-- A target whose keys are already gone (Redis restarted empty) counts as retired.
-- KEYS: the target prelude's fifteen keys, then
-- KEYS[16] cached reusable answer   KEYS[17] its lock   KEYS[18] fence counter
-- KEYS[19] followers (ZSET by lease end: only live ones count)
-- Orphaned provider tasks (KEYS[12]) do not keep a target: nobody is left to adopt them.
-- ARGV[1..6]: the target prelude's.   ARGV[7] target idle (ms): a last use at or before
-- now - ARGV[7] may retire.
-- Returns: {1} retired | {0, woken...} kept; `woken` got passed-on mail while reaping.
local idle_before = now - tonumber(ARGV[7])
local last = tonumber(redis.call('HGET', stats, 'last') or '0')
if last > idle_before then return {0} end
local woken = reap()
drop_stale()
local busy = redis.call('ZCARD', pool) + redis.call('ZCARD', waiters)
  + redis.call('ZCARD', wlease) + redis.call('ZCARD', inflight)
  + redis.call('HLEN', mbox) + redis.call('ZCARD', mlease)
  + redis.call('ZCARD', holds)
  + redis.call('EXISTS', KEYS[16]) + redis.call('EXISTS', KEYS[17])
  + redis.call('ZCOUNT', KEYS[19], now, '+inf')
if busy > 0 or #woken > 0 then return extend({0}, woken) end
-- The op records expire by themselves; the markers go with the target (an instance renewing
-- an entry of a target idle this long has none left to renew).
redis.call('DEL', pool, waiters, wlease, inflight, mbox, mlease, stats, fin, gone, notes,
  orphans, adopted, held, holds, KEYS[16], KEYS[17], KEYS[18], KEYS[19])
return {1}
