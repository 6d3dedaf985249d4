-- shared_finish: the task for a reusable target ended. Every follower gets the outcome; an
-- answer is cached until it expires; the lock is released only by the leader holding it
-- (compare-and-delete with the fencing token). A failure from a leader whose lock a newer leader
-- holds fails nobody: the newer leader's task covers every follower.
-- KEYS[1] cached answer   KEYS[2] lock   KEYS[3] followers   KEYS[4] mbox   KEYS[5] mlease
-- ARGV[1] now (ms)   ARGV[2] fencing token   ARGV[3] mail ("A|exp|json" or "F|json")
-- ARGV[4] mail ttl (ms)
-- Returns: the followers that got mail (their instances must be told).
local now, mail = tonumber(ARGV[1]), ARGV[3]
local exp, json = string.match(mail, '^A|(%d+)|(.*)$')
local holder = redis.call('GET', KEYS[2])
if not exp and holder and holder ~= ARGV[2] then return {} end
if exp and tonumber(exp) > now then
  redis.call('SET', KEYS[1], exp .. '|' .. json, 'PX', tonumber(exp) - now)
end
if holder == ARGV[2] then redis.call('DEL', KEYS[2]) end
local followers = redis.call('SMEMBERS', KEYS[3])
redis.call('DEL', KEYS[3])
for _, w in ipairs(followers) do
  redis.call('HSET', KEYS[4], w, mail)
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), w)
end
return followers
