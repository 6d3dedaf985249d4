-- queue_renew: renews this consumer's leases (a lease is the entry's idle time). Only an entry
-- still pending for this consumer is touched: a plain XCLAIM would steal it back from a worker
-- that took it over, so ownership is checked first.
-- KEYS[1] tasks stream   ARGV[1] group   ARGV[2] consumer   ARGV[3..] stream ids
-- Returns: the ids whose lease is lost (gone, or owned by another consumer).
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #p == 0 then
    lost[#lost + 1] = id
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
  end
end
return lost
