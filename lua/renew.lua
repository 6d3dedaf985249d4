-- renew: an instance extends the leases of its live waiters and running tasks on one target,
-- and restores those a lapse removed (Redis unreachable or paused longer than a lease, or
-- restarted empty): a waiter comes back at its original place unless it was
-- served, left, or has mail waiting; a claim comes back unless its task finished. Pooled answers
-- then go to restored waiters first. Safe to run twice.
-- A waiter its instance still renews that was served or left here (its mail passed on after its
-- deadline while the instance could not take it, or a failover lost the reply of its take) will
-- never get anything: it is reported ended, and its instance lets its caller go.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] label   ARGV[8] number of waiters that follow
-- ARGV[9..] pairs of waiter id and its arrival (ms), then claim ids
-- Returns: {waiters restored, claims restored, n, ended waiters 1..n, woken...}.
if redis.call('HSETNX', stats, 'label', ARGV[7]) == 1 then touch() end
local nw = tonumber(ARGV[8])
local back_w, back_c, ended = 0, 0, {}
local last = 8 + 2 * nw
for i = 9, last, 2 do
  local w = ARGV[i]
  if redis.call('ZSCORE', waiters, w) then
    redis.call('ZADD', wlease, now + lease, w)
  elseif redis.call('HEXISTS', mbox, w) == 1 then
    -- Its instance takes the mail (the renewer looks for mail whose announcement was lost).
  elseif redis.call('ZSCORE', gone, w) then
    table.insert(ended, w)
  else
    redis.call('ZADD', waiters, tonumber(ARGV[i + 1]), w)
    redis.call('ZADD', wlease, now + lease, w)
    back_w = back_w + 1
  end
end
for i = last + 1, #ARGV do
  local c = ARGV[i]
  if redis.call('ZSCORE', inflight, c) then
    redis.call('ZADD', inflight, now + lease, c)
  elseif not redis.call('ZSCORE', fin, c) then
    -- Back before anyone adopted its provider task: it is this claim's again.
    redis.call('ZREM', orphans, c)
    redis.call('ZADD', inflight, now + lease, c)
    back_c = back_c + 1
  end
end
local woken = reap()
settle(woken)
return extend(extend({back_w, back_c, #ended}, ended), woken)
