-- shared_renew: an instance keeps its part of a reusable target alive: the leases of its live
-- followers and, while its leader's task runs, the lock (compare-and-extend with the fencing
-- token). Run every third of a lease.
-- What a lapse removed is put back while it is still live (a pause of the instance or of Redis
-- longer than a lease, or Redis restarted empty): a live follower without mail rejoins the
-- followers; a lock that is gone is taken again only when no newer leader was ever appointed
-- (the fence counter is not past the token; a counter that is gone or behind means Redis lost
-- its data, and is moved up to the token so tokens keep increasing). A finished leadership
-- moved the counter past its token (shared_finish.lua), so it is never resurrected.
-- KEYS[1] lock   KEYS[2] fence counter   KEYS[3] followers (ZSET)   KEYS[4] mbox
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] lease (ms)   ARGV[3] token this instance leads with, or 0
-- ARGV[4..] this instance's live followers of the target
-- Returns: 1 while the lock is this leader's, 0 when it is lost (or ARGV[3] is 0).
local now, lease, token = clock(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i = 4, #ARGV do
  if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 0 then
    redis.call('ZADD', KEYS[3], now + lease, ARGV[i])
  end
end
if token == '0' then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == token then
  redis.call('PEXPIRE', KEYS[1], lease)
  return 1
end
if holder then return 0 end
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
if fence > tonumber(token) then return 0 end
if fence < tonumber(token) then redis.call('SET', KEYS[2], token) end
redis.call('SET', KEYS[1], token, 'PX', lease)
return 1
