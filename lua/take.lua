-- take: a waiter's instance collects the mail delivered to it. Mail that has less than
-- min_remaining left by now (its instance was slow to take it) is waste, and the waiter goes
-- back to its place in the queue instead of getting a dead answer; its instance's coverer
-- starts a task for it if none covers it.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] waiter id   ARGV[8] its arrival (ms), or '' for a follower of a reusable target
-- Returns: {0} no mail (already taken, or passed on after its deadline) | {1, mail, remaining}
--          (remaining: ms of life left for an answer, 0 for a failure) | {2} requeued.
local r = replay()
if r then return r end
local mail = redis.call('HGET', mbox, ARGV[7])
if not mail then return done({0}) end
redis.call('HDEL', mbox, ARGV[7])
redis.call('ZREM', mlease, ARGV[7])
local exp = answer_of(mail)
if exp and exp < min_expiry then
  incr('expired_unused', 1)
  if ARGV[8] == '' then return done({0}) end
  redis.call('ZADD', waiters, tonumber(ARGV[8]), ARGV[7])
  redis.call('ZADD', wlease, now + lease, ARGV[7])
  return done({2})
end
mark(gone, ARGV[7])
return done({1, mail, exp and (exp - now) or 0})
