-- queue_enqueue: adds one task to the stream, at most once per idempotency key (the key and the
-- entry appear together or not at all). A stream made here gets its consumer group at once, so
-- the lag KEDA reads counts this entry even before any worker runs (scale from zero).
-- KEYS[1] tasks stream   KEYS[2] idempotency key (absent without one)
-- ARGV[1] group   ARGV[2] idempotency key TTL (ms)   ARGV[3] task id   ARGV[4..] field, value...
-- Returns: {task id, 0} when added; {the first task's id, 1} when the key was already used.
if #KEYS == 2 then
  local existing = redis.call('GET', KEYS[2])
  if existing then return {existing, 1} end
end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
if fresh then redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0') end
if #KEYS == 2 then redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2]) end
return {ARGV[3], 0}
