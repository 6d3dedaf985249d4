-- shared_takeover: run every third of a lease by each instance with callers following a
-- reusable target. When the lock is gone (its leader died: nobody renewed it for a lease) and
-- live followers remain, the first instance to run this takes over: a new fencing token and the
-- lock, and it starts the one task; Redis runs scripts one at a time, so every other instance
-- then finds the lock and keeps following. A fresh cached answer is mailed to the followers
-- instead (a follower restored by renewal after the answer was shared).
-- KEYS[1] cached answer   KEYS[2] lock   KEYS[3] fence counter   KEYS[4] followers (ZSET)
-- KEYS[5] mbox   KEYS[6] mlease
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] min_remaining (ms)
-- ARGV[3] lease (ms)   ARGV[4] mail ttl (ms)
-- Returns: {0} nothing to do | {1, woken...} the cached answer was mailed | {2, token} lead.
local now = clock(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. now)
if redis.call('EXISTS', KEYS[2]) == 1 then return {0} end
if redis.call('ZCARD', KEYS[4]) == 0 then return {0} end
local cached = redis.call('GET', KEYS[1])
if cached then
  local exp, json = string.match(cached, '^(%d+)|(.*)$')
  if exp and tonumber(exp) >= now + tonumber(ARGV[2]) then
    local followers = redis.call('ZRANGE', KEYS[4], 0, -1)
    redis.call('DEL', KEYS[4])
    for _, w in ipairs(followers) do
      redis.call('HSET', KEYS[5], w, 'A|' .. cached)
      redis.call('ZADD', KEYS[6], now + tonumber(ARGV[4]), w)
    end
    return {1, unpack(followers)}
  end
  redis.call('DEL', KEYS[1])
end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], token, 'PX', tonumber(ARGV[3]))
return {2, token}
