-- seed_finish: ends one entry: writes its result in the seed's shape unless the task already has
-- one (exactly one result per task id, whoever finished first), indexes it for the retention
-- sweep, and removes the entry from this consumer's processing list. Run twice, it writes
-- nothing more (the first result stays) and removes at most one more identical entry, whose task
-- then already has its result.
-- KEYS[1] results (HASH id -> result json)   KEYS[2] results index (ZSET id -> finished ms)
-- KEYS[3] this consumer's processing list (LIST)   KEYS[4] the seed's queue (LIST)
-- KEYS[5] queue length (STRING)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] the entry, exactly as taken
-- ARGV[3] task id ('' to drop the entry without a result)   ARGV[4] result json
-- Returns: {written (1 or 0), entries removed (1, or 0 if this consumer's list lost it)}
local now = clock(ARGV[1])
local written = 0
if ARGV[3] ~= '' and redis.call('HSETNX', KEYS[1], ARGV[3], ARGV[4]) == 1 then
  redis.call('ZADD', KEYS[2], now, ARGV[3])
  written = 1
end
local removed = redis.call('LREM', KEYS[3], 1, ARGV[2])
redis.call('SET', KEYS[5], redis.call('LLEN', KEYS[4]))
return {written, removed}
