-- renew: an instance extends the leases of its live waiters and running tasks on one target.
-- Only entries still present are extended: one that is gone was served, finished, or lost its
-- lease in a pause longer than the lease; putting it back could resurrect a finished task.
-- KEYS[1] wlease   KEYS[2] inflight
-- ARGV[1] lease end (ms)   ARGV[2] number of waiter ids that follow
-- ARGV[3..] waiter ids, then claim ids
-- Returns: {waiter leases extended, claim leases extended}.
local lease, nw = tonumber(ARGV[1]), tonumber(ARGV[2])
local kept_w, kept_c = 0, 0
for i = 3, 2 + nw do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', lease, ARGV[i])
    kept_w = kept_w + 1
  end
end
for i = 3 + nw, #ARGV do
  if redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    redis.call('ZADD', KEYS[2], 'XX', lease, ARGV[i])
    kept_c = kept_c + 1
  end
end
return {kept_w, kept_c}
