-- budget_acquire: asks for one thread of the account for lease id ARGV[6], of class ARGV[7]
-- (0 interactive, 1 queued, 2 refill), in the place of a waiter that first asked ARGV[10] ms ago
-- (a task asking again after a refusal keeps its place). Granted when the leases plus the
-- waiters ahead (of its own or a more urgent class, that first asked earlier) stay under the
-- class's limit: the cap, less ARGV[8] reserved threads for refills (never below one thread of
-- a non-zero cap). Otherwise the caller is registered as a waiter (keeping its place) until
-- ARGV[9] ms from now.
-- ARGV[11]: how many of the followers first asked before this caller. ARGV[12..]: followers,
-- pairs of lease id and ms since it first asked, of the same class queued in this caller's
-- process, in order of first arrival. Followers and this caller are asked for in that order,
-- each as if it asked itself, until one is not granted; those after it are left alone (a
-- follower is never registered: each asks for itself when its turn comes). One round trip then
-- serves a whole queue of askers, and a follower that came first is never overtaken by the one
-- whose turn it is. Run again with the same ids after a lost reply, it answers the grants
-- already made.
-- Returns {1, fence, leases, cap, followers granted} granted | {0, 0, leases, cap, followers
-- granted} wait (followers granted: how many of the followers, from the first, got a thread).
local class, reserve, wttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
reap()
local cap = effective_cap()
local limit = cap
if class == 2 then limit = math.max(cap - reserve, math.min(cap, 1)) end

-- One id's ask, for a waiter that first asked `age` ms ago: {granted, fence}; a refused one is
-- registered as a waiter when `register`.
local function ask(id, age, register)
  local fence = redis.call('HGET', KEYS[3], id)
  if fence and redis.call('ZSCORE', KEYS[1], id) then return true, tonumber(fence) end
  local leases = redis.call('ZCARD', KEYS[1])
  local score = tonumber(redis.call('ZSCORE', KEYS[4], id)) or (class * 1e13 + now - age)
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

local own_age, before = tonumber(ARGV[10]), tonumber(ARGV[11])
local followers = 0
local function waits()
  -- This caller keeps its place, whoever ahead of it in this process was refused.
  ask(ARGV[6], own_age, true)
  return {0, 0, redis.call('ZCARD', KEYS[1]), cap, followers}
end
local i = 12
for _ = 1, before do
  if not ask(ARGV[i], tonumber(ARGV[i + 1]), false) then return waits() end
  followers = followers + 1
  i = i + 2
end
local granted, fence = ask(ARGV[6], own_age, true)
if not granted then return {0, 0, redis.call('ZCARD', KEYS[1]), cap, followers} end
while i < #ARGV do
  if not ask(ARGV[i], tonumber(ARGV[i + 1]), false) then break end
  followers = followers + 1
  i = i + 2
end
return {1, fence, redis.call('ZCARD', KEYS[1]), cap, followers}
