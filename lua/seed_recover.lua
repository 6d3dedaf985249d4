-- seed_recover: gives a dead consumer's entries back to the head of the seed's queue, oldest
-- first, so they are the next taken, then forgets the consumer: one script, so no entry is ever
-- in neither list nor in both. Checks the consumer is still silent for ARGV[3] ms: a consumer
-- that beat since it was listed is left alone. Run twice, the second finds nothing to move.
-- Also a consumer's own hand-back at a graceful exit (ARGV[3] = 0).
-- KEYS[1] consumers (ZSET name -> last beat ms)   KEYS[2] its processing list (LIST)
-- KEYS[3] the seed's queue (LIST)   KEYS[4] queue length (STRING)
-- KEYS[5] the consumer's taken-for-dead mark (STRING): set unless this is its own hand-back, so
--         that its late finishes write no result (seed_finish.lua)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] the consumer's name
-- ARGV[3] how long it must have been silent (ms)   ARGV[4] how long the mark is kept (ms)
-- Returns: how many entries were given back, or -1 if the consumer is alive after all.
local now, name, silent = clock(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local beat = tonumber(redis.call('ZSCORE', KEYS[1], name))
if beat and beat > now - silent then return -1 end
local moved = 0
while redis.call('LMOVE', KEYS[2], KEYS[3], 'RIGHT', 'LEFT') do
  moved = moved + 1
end
redis.call('ZREM', KEYS[1], name)
if silent > 0 then redis.call('SET', KEYS[5], '1', 'PX', ARGV[4]) end
redis.call('SET', KEYS[4], redis.call('LLEN', KEYS[3]))
return moved
