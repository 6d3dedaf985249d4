-- seed_take: moves up to ARGV[3] entries, oldest first, from seed 003's list to this consumer's
-- processing list (docs/QUEUE.md "Seed 003 list compatibility"), so an entry is always in one of
-- the two lists and a consumer that dies holding it loses nothing. Also a beat of the consumer
-- (a take proves it alive, and registers a list moved by a blocking take while it was thought
-- dead) and the queue length the seed's autoscaler reads.
-- KEYS[1] the seed's queue (LIST)   KEYS[2] this consumer's processing list (LIST)
-- KEYS[3] consumers (ZSET name -> last beat ms)   KEYS[4] queue length (STRING)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] this consumer's name
-- ARGV[3] how many entries at most (0: only the beat and the length)
-- Returns: the entries taken, in queue order.
-- A lost reply leaves the entries in the processing list, where the worker finds them again
-- (it rereads its own list after any failed take).
local now, me, want = clock(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local taken = {}
for _ = 1, want do
  local entry = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not entry then break end
  taken[#taken + 1] = entry
end
redis.call('ZADD', KEYS[3], now, me)
redis.call('SET', KEYS[4], redis.call('LLEN', KEYS[1]))
return taken
