-- seed_beat: this consumer says it is alive, and learns which consumers have not said so for a
-- lease (dead, or paused past it): their processing lists are to be recovered (seed_recover.lua).
-- KEYS[1] consumers (ZSET name -> last beat ms)
-- ARGV[1] '' (Redis time) or an explicit clock (ms)   ARGV[2] this consumer's name
-- ARGV[3] lease (ms)   ARGV[4] how many dead consumers to list at most
-- Returns: {1 if this consumer was registered already, 0 if it had been taken for dead (or Redis
--           lost the set), {the dead consumers' names}}
local now, me, lease, most = clock(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local added = redis.call('ZADD', KEYS[1], now, me)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now - lease),
  'LIMIT', 0, most)
local others = {}
for _, name in ipairs(dead) do
  if name ~= me then others[#others + 1] = name end
end
return {1 - added, others}
