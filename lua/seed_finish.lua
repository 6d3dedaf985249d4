-- seed_finish: ends one entry: removes it from this consumer's processing list and, if it was
-- still there, writes its result in the seed's shape and indexes it for the retention sweep. A
-- result already under the id is replaced, as the seed's own worker did: an id the producer
-- pushes again is a new task, not a redelivery.
-- An entry no longer in the list was either given back to the queue while this consumer was
-- taken for dead (KEYS[6] is set: the entry now belongs to whoever took it next, so this late
-- result is not written), or lost by Redis (restarted empty, or a promoted replica that missed
-- the take): then the result is written if the task has none, so its producer is still answered.
-- Run twice, the second run finds the entry gone and the result there, and writes nothing more.
-- KEYS[1] results (HASH id -> result json)   KEYS[2] results index (ZSET id -> finished ms)
-- KEYS[3] this consumer's processing list (LIST)   KEYS[4] the seed's queue (LIST)
-- KEYS[5] queue length (STRING)   KEYS[6] this consumer's taken-for-dead mark (seed_recover.lua)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] the entry, exactly as taken
-- ARGV[3] task id ('' to drop the entry without a result)   ARGV[4] result json
-- Returns: {written (1 or 0), entries removed (1, or 0 if this consumer's list lost it)}
local now = clock(ARGV[1])
local written = 0
local removed = redis.call('LREM', KEYS[3], 1, ARGV[2])
if ARGV[3] ~= '' then
  if removed == 1 then
    redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
    written = 1
  elseif redis.call('EXISTS', KEYS[6]) == 0 then
    written = redis.call('HSETNX', KEYS[1], ARGV[3], ARGV[4])
  end
  if written == 1 then redis.call('ZADD', KEYS[2], now, ARGV[3]) end
end
redis.call('SET', KEYS[5], redis.call('LLEN', KEYS[4]))
return {written, removed}
