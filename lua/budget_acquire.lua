-- budget_acquire: asks for one thread of the account for lease id ARGV[6], of class ARGV[7]
-- (0 interactive, 1 queued, 2 refill). Granted when the leases plus the waiters ahead (of its
-- own or a more urgent class, registered earlier) stay under the class's limit: the cap, less
-- ARGV[8] reserved threads for refills (never below one thread of a non-zero cap). Otherwise the
-- caller is registered as a waiter (keeping its place) until ARGV[9] ms from now.
-- Run again with the same id after a lost reply, it answers the grant already made.
-- Returns {1, fence, leases, cap} granted | {0, 0, leases, cap} wait.
local id, class, reserve, wttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
reap()
local cap = effective_cap()
local fence = redis.call('HGET', KEYS[3], id)
if fence and redis.call('ZSCORE', KEYS[1], id) then
  return {1, tonumber(fence), redis.call('ZCARD', KEYS[1]), cap}
end
local limit = cap
if class == 2 then limit = math.max(cap - reserve, math.min(cap, 1)) end
local leases = redis.call('ZCARD', KEYS[1])
local score = tonumber(redis.call('ZSCORE', KEYS[4], id)) or (class * 1e13 + now)
local ahead = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. string.format('%.0f', score))
if leases + ahead < limit then
  local f = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], now + lease, id)
  redis.call('HSET', KEYS[3], id, f)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  return {1, f, leases + 1, cap}
end
redis.call('ZADD', KEYS[4], 'NX', score, id)
redis.call('ZADD', KEYS[5], now + wttl, id)
return {0, 0, leases, cap}
