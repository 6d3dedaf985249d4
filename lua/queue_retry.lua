-- queue_retry: hands a delivered entry back for a later attempt: scheduled in the retry set at
-- Redis' now + delay, then acknowledged and removed from the stream, atomically (no moment
-- where it is in neither).
-- KEYS[1] tasks stream   KEYS[2] retry set
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] stream id   ARGV[4] delay (ms)   ARGV[5] payload
-- Returns: 1 scheduled, 0 lease lost (its new owner decides).
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1
