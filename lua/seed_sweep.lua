-- seed_sweep: removes results older than the retention, with their index entries (Redis 7.0
-- has no expiry per hash field). At most ARGV[3] per call; idempotent, so every worker may run
-- it.
-- KEYS[1] results (HASH id -> result json)   KEYS[2] results index (ZSET id -> finished ms)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] retention (ms)
-- ARGV[3] how many at most
-- Returns: how many results were removed.
local now, retention, most = clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - retention),
  'LIMIT', 0, most)
if #old == 0 then return 0 end
redis.call('HDEL', KEYS[1], unpack(old))
redis.call('ZREM', KEYS[2], unpack(old))
return #old
