-- queue_begin: before working on a delivered entry. An entry whose task already has a result
-- (its first worker finished after its lease ran out) is only acknowledged and removed.
-- KEYS[1] tasks stream   KEYS[2] result key (absent when the entry has no readable id)
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] stream id
-- Returns: {0} lease lost; {2} result already there (acknowledged); {1, deliveries} go ahead.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 0 then return {0} end
if #KEYS == 2 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('XDEL', KEYS[1], ARGV[3])
  return {2}
end
return {1, p[1][4]}
