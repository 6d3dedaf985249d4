-- finish: an upstream task for a single-use target ended. An answer goes to the oldest waiter,
-- else the pool; a failure goes to the oldest waiter no remaining task covers; a stale answer
-- is waste, and restarts a task when a waiter is left uncovered. An answer already expired here
-- (its instance paused after checking it) is a stale one.
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)   ARGV[2] the task's claim id   ARGV[3] outcome: 'A' | 'F' | 'S' | 'R'
-- ARGV[4] mail ("A|exp|json" or "F|json"; empty for 'S')   ARGV[5] poolable ('1'/'0')
-- ARGV[6] claim id for a restart   ARGV[7] its lease end (ms)   ARGV[8] mail ttl (ms)
-- Returns: {restart (0/1), woken...}: whether to start a task under ARGV[6], and the waiters
--          that got mail (their instances must be told).
local now, mail_ttl = tonumber(ARGV[1]), tonumber(ARGV[8])
touch(now)
redis.call('ZREM', inflight, ARGV[2])
local woken = reap(now, ARGV[5], mail_ttl)
local restart = 0
local outcome = ARGV[3]
if outcome == 'A' and (answer_of(ARGV[4]) or 0) <= now then outcome = 'S' end
if outcome == 'A' then
  local w = place(ARGV[4], ARGV[5], now, mail_ttl)
  if w then table.insert(woken, w) end
elseif outcome == 'R' then
  -- Requeued by a stopping instance: nothing delivered; an uncovered waiter's own instance
  -- starts a task for it (cover.lua).
elseif outcome == 'F' then
  if redis.call('ZCARD', waiters) > redis.call('ZCARD', inflight) then
    local w = hand_to_oldest(ARGV[4], now, mail_ttl)
    if w then table.insert(woken, w) end
  end
else
  incr('expired_unused', 1)
  if redis.call('ZCARD', waiters) > redis.call('ZCARD', inflight) then
    redis.call('ZADD', inflight, tonumber(ARGV[7]), ARGV[6])
    incr('new_tasks', 1)
    restart = 1
  end
end
return {restart, unpack(woken)}
