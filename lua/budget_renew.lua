-- budget_renew: one holder extends its live leases ARGV[6..] to a lease from now; run every
-- third of a lease, also with no ids, to refresh the holder's view of the fleet. A lease found
-- gone or lapsed is lost: it is reported, never put back (its thread may be someone else's).
-- Leases that lapsed are reaped, and waiters told.
-- Returns {leases, cap, lost id...}.
local lost = {}
for i = 6, #ARGV do
  local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if s and s >= now then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
end
if reap() > 0 then redis.call('PUBLISH', ARGV[5], '1') end
local out = {redis.call('ZCARD', KEYS[1]), effective_cap()}
for _, id in ipairs(lost) do out[#out + 1] = id end
return out
