-- queue_promote: moves retries that are due back into the stream (any worker may run it; each
-- member moves once, as ZREM goes with its XADD).
-- KEYS[1] tasks stream   KEYS[2] retry set   ARGV[1] group   ARGV[2] most to move
-- Returns: how many moved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local fresh = redis.call('EXISTS', KEYS[1]) == 0
for _, member in ipairs(due) do
  local ok, pairs = pcall(cjson.decode, member)
  if ok and type(pairs) == 'table' and #pairs > 0 then
    local flat = {}
    for _, kv in ipairs(pairs) do
      flat[#flat + 1] = tostring(kv[1])
      flat[#flat + 1] = tostring(kv[2])
    end
    redis.call('XADD', KEYS[1], '*', unpack(flat))
  end
  redis.call('ZREM', KEYS[2], member)
end
if fresh and #due > 0 then redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0') end
return #due
