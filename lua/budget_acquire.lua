-- budget_acquire: asks for one thread of the account for lease id ARGV[6], of class ARGV[7]
-- (0 interactive, 1 queued, 2 refill). Granted when the leases plus the waiters ahead (of its
-- own or a more urgent class, registered earlier) stay under the class's limit: the cap, less
-- ARGV[8] reserved threads for refills (never below one thread of a non-zero cap). Otherwise the
-- caller is registered as a waiter (keeping its place) until ARGV[9] ms from now.
-- ARGV[10..]: followers, lease ids of the same class queued behind this caller in its process.
-- Once this caller is granted, each follower in order is asked for as if it asked next itself,
-- until one is not granted; that one and those after it are left alone (not registered: each
-- asks for itself when its turn comes). One round trip then serves a whole queue of askers.
-- Run again with the same ids after a lost reply, it answers the grants already made.
-- Returns {1, fence, leases, cap, followers granted} granted | {0, 0, leases, cap, 0} wait.
local class, reserve, wttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
reap()
local cap = effective_cap()
local limit = cap
if class == 2 then limit = math.max(cap - reserve, math.min(cap, 1)) end

-- One id's ask: {granted, fence}; a refused one is registered as a waiter when `register`.
local function ask(id, register)
  local fence = redis.call('HGET', KEYS[3], id)
  if fence and redis.call('ZSCORE', KEYS[1], id) then return true, tonumber(fence) end
  local leases = redis.call('ZCARD', KEYS[1])
  local score = tonumber(redis.call('ZSCORE', KEYS[4], id)) or (class * 1e13 + now)
  local ahead = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. string.format('%.0f', score))
  if leases + ahead < limit then
    local f = redis.call('INCR', KEYS[2])
    redis.call('ZADD', KEYS[1], now + lease, id)
    redis.call('HSET', KEYS[3], id, f)
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    return true, f
  end
  if register then
    redis.call('ZADD', KEYS[4], 'NX', score, id)
    redis.call('ZADD', KEYS[5], now + wttl, id)
  end
  return false, 0
end

local granted, fence = ask(ARGV[6], true)
if not granted then return {0, 0, redis.call('ZCARD', KEYS[1]), cap, 0} end
local followers = 0
for i = 10, #ARGV do
  if not ask(ARGV[i], false) then break end
  followers = followers + 1
end
return {1, fence, redis.call('ZCARD', KEYS[1]), cap, followers}
