-- arrive: one caller of a single-use target. Takes a pooled answer, or waits for an in-flight
-- task that no earlier waiter has spoken for, or claims a new task (promises 1-3), atomically.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] waiter id   ARGV[8] claim id to use if a task must start
-- ARGV[9] batch this instance releases first ('' none)   ARGV[10] how many of it it handed out
-- ARGV[11] answers to hold for a new batch on a pool hit (0 none)   ARGV[12] the hold's lease
--          (ms)   ARGV[13] the new batch's id (see `release` and `hold` in the prelude)
-- Returns: {code, now, answer json, remaining ms, n, held mail 1..n, woken...}; code 1 pooled
--          (the answer is the caller's) | 2 wait | 3 wait and start a task under ARGV[8]. `now`
--          is the waiter's arrival (its place in the queue, which renewal restores). For code 3
--          the answer field holds the provider task the new claim adopted (see `adopt`), or ''.
--          `held mail`: the new batch's answers ('A|<expires_at>|<json>'), code 1 only. `woken`:
--          waiters that got an answer while reaping or releasing; their instances must be told.
local r = replay()
if r then return r end
touch()
-- The hot path checks before it works: with no leases or mail deadlines at all (a target served
-- from its pool) there is nothing to reap, and stale answers are the earliest-expiring, so only
-- a stale first one means any. Each skipped call was ~10-15 % of a pool hit's Redis time
-- (docs/BENCHMARKS.md "Hot path and capacity").
local woken = {}
if redis.call('EXISTS', wlease, inflight, mlease, holds) > 0 then woken = reap() end
release(ARGV[9], tonumber(ARGV[10]), woken)
local top = redis.call('ZRANGE', pool, 0, 0, 'WITHSCORES')
if #top > 0 and tonumber(top[2]) < min_expiry then
  drop_stale()
  top = redis.call('ZRANGE', pool, 0, 0, 'WITHSCORES')
end
if #top > 0 then
  redis.call('ZREM', pool, top[1])
  incr('pool_hits', 1)
  local batch = hold(ARGV[13], tonumber(ARGV[11]), tonumber(ARGV[12]))
  local reply = extend(extend({1, now, top[1], tonumber(top[2]) - now, #batch}, batch), woken)
  -- A pool hit keeps no record unless it woke waiters or took a batch: if its reply is lost,
  -- the answer it took is one answer of waste and never a second caller's (run again, it takes
  -- another), while a record per hit is a key written and expired at the hit rate. Woken
  -- waiters must still be told, and a batch released, so those replies are kept for a retry.
  if #woken == 0 and #batch == 0 then return reply end
  return done(reply)
end
local covered = redis.call('ZCARD', waiters) < redis.call('ZCARD', inflight)
redis.call('ZADD', waiters, now, ARGV[7])
redis.call('ZADD', wlease, now + lease, ARGV[7])
if covered then
  incr('waits_served', 1)
  return done(extend({2, now, '', 0, 0}, woken))
end
redis.call('ZADD', inflight, now + lease, ARGV[8])
incr('new_tasks', 1)
return done(extend({3, now, adopt(ARGV[8]), 0, 0}, woken))
