-- shared_arrive: one caller of a reusable target (promise 4). A cached answer with enough life
-- left is shared; otherwise the caller follows the one task solving it, or leads a new one under
-- a lock with a fencing token. The lock is a lease: its instance renews it while the task runs
-- (shared_renew.lua), so a lock that outlives a lease belongs to a live leader; a dead leader's
-- lock lapses within one lease and its followers are taken over (shared_takeover.lua).
-- KEYS[1] cached answer (STRING "exp|json", expires by itself)   KEYS[2] lock (STRING token)
-- KEYS[3] fence counter   KEYS[4] followers (ZSET waiter id -> lease end, ms)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] min_remaining (ms)
-- ARGV[3] waiter id   ARGV[4] lease (ms)
-- Returns: {1, answer json, remaining ms} cached | {2} follow | {3, token} lead.
local now, lease = clock(ARGV[1]), tonumber(ARGV[4])
local cached = redis.call('GET', KEYS[1])
if cached then
  local exp, json = string.match(cached, '^(%d+)|(.*)$')
  if exp and tonumber(exp) >= now + tonumber(ARGV[2]) then return {1, json, tonumber(exp) - now} end
  redis.call('DEL', KEYS[1])
end
-- Followers whose instance stopped renewing them (it died, or the caller left) are forgotten
-- here, so a busy target's set does not grow with every caller that ever left.
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. now)
redis.call('ZADD', KEYS[4], now + lease, ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return {2} end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], token, 'PX', lease)
return {3, token}
