-- shared_finish: the task for a reusable target ended. Every live follower gets the outcome; an
-- answer is cached until it expires; the lock is released only by the leader holding it
-- (compare-and-delete with the fencing token). Any leader's answer is shared and cached (an
-- answer is as good as any for a reusable target), but only the lock holder's failure is
-- delivered: a leader that lost its lock (it paused past its lease, its finish ran twice, or a
-- follower took over) fails nobody, since the current leader's task, or the next takeover,
-- covers every follower.
-- The leadership is marked ended by moving the fence counter past its token (when no newer
-- leader did), so a renewal racing this finish cannot restore the lock (see shared_renew.lua).
-- KEYS[1] cached answer   KEYS[2] lock   KEYS[3] followers   KEYS[4] mbox   KEYS[5] mlease
-- KEYS[6] fence counter
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] fencing token
-- ARGV[3] "A|<remaining ms>|json" (stamped here with its expiry in Redis time) or "F|json"
-- ARGV[4] mail ttl (ms)
-- Returns: the followers that got mail (their instances must be told).
local now, mail = clock(ARGV[1]), ARGV[3]
local exp, json = string.match(mail, '^A|(%-?%d+)|(.*)$')
if exp then
  exp = now + tonumber(exp)
  mail = 'A|' .. exp .. '|' .. json
end
local holds = redis.call('GET', KEYS[2]) == ARGV[2]
if tonumber(redis.call('GET', KEYS[6]) or '0') == tonumber(ARGV[2]) then
  redis.call('INCR', KEYS[6])
end
if not exp and not holds then return {} end
if exp and exp > now then
  redis.call('SET', KEYS[1], exp .. '|' .. json, 'PX', exp - now)
end
if holds then redis.call('DEL', KEYS[2]) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
local followers = redis.call('ZRANGE', KEYS[3], 0, -1)
redis.call('DEL', KEYS[3])
for _, w in ipairs(followers) do
  redis.call('HSET', KEYS[4], w, mail)
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), w)
end
return followers
