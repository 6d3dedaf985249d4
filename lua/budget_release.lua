-- budget_release: gives back lease ARGV[6] (its task ended), and ARGV[7..] likewise (releases
-- gathered into one call), and tells waiters once. Only those ids are removed, so a replay or a
-- late run never frees another holder's thread; a second run finds nothing and changes nothing.
-- Also withdraws a waiter of each id (an acquire given up).
-- Returns {1 removed | 0 it was not there (lapsed, or released before), leases, then 1 | 0 for
-- each further id in order}.
reap()
local out = {0, 0}
local freed = false
for i = 6, #ARGV do
  local id = ARGV[i]
  local removed = redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  if removed == 1 then freed = true end
  if i == 6 then out[1] = removed else out[#out + 1] = removed end
end
if freed then redis.call('PUBLISH', ARGV[5], '1') end
out[2] = redis.call('ZCARD', KEYS[1])
return out
