-- The thread budget's prelude (docs/REDIS.md "Thread budget"): one account's leases, fencing
-- counter, waiters and cap, under one hash tag. Prepended (after clock.lua) to every budget_*
-- script.
-- KEYS[1] leases (ZSET lease id -> expiry ms)   KEYS[2] fencing counter (STRING)
-- KEYS[3] fences (HASH lease id -> fence)   KEYS[4] waiters (ZSET waiter id -> class * 1e13 + arrival ms)
-- KEYS[5] waiter expiry (ZSET waiter id -> expiry ms)   KEYS[6] cap (HASH plan, after_cut, cut_at)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] lease (ms)   ARGV[3] configured threads
-- ARGV[4] cap increase step (ms)   ARGV[5] channel told when threads free   ARGV[6..] the script's own
local now, lease, threads, step = clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

-- Forgets leases nobody renewed (their holder died or paused past a lease) and waiters nobody
-- refreshed, so every set shrinks without a sweeper. Returns how many leases lapsed.
local function reap()
  local cutoff = '(' .. string.format('%.0f', now)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
  for _, id in ipairs(lapsed) do redis.call('HDEL', KEYS[3], id) end
  if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff) end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', cutoff)
  for _, id in ipairs(gone) do redis.call('ZREM', KEYS[4], id) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', cutoff) end
  return #lapsed
end

-- The effective cap: the configured threads, the plan's where known, and after a cut the cut
-- value plus one per step since (src/provider/budget/cap.rs computes the same).
local function effective_cap()
  local c = redis.call('HMGET', KEYS[6], 'plan', 'after_cut', 'cut_at')
  local cap = threads
  local plan, after, at = tonumber(c[1]), tonumber(c[2]), tonumber(c[3])
  if plan and plan > 0 and plan < cap then cap = plan end
  if after and at then
    local grown = after + math.floor(math.max(0, now - at) / step)
    if grown < cap then cap = grown end
  end
  return cap
end

-- Whether a capacity refusal with `others` of our tasks in flight besides the refused one is the
-- plan's size, the provider having lately accepted a task with `proven` others in flight and the
-- cap being `cap` (src/provider/budget/cap.rs `refusal_is_plan` decides the same): more than
-- the provider just carried, and at least half the cap. Else the provider is short a moment.
local function refusal_is_plan(others, proven, cap)
  return others > proven and others * 2 >= cap
end
