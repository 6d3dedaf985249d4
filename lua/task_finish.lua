-- task_finish: writes a task record's result once (promise 6); a second finish changes nothing.
-- A record that is gone while its task ran (Redis restarted empty) is written again whole from
-- the copy its instance kept, so its caller can still read the result.
-- KEYS[1] task record (HASH: record json, state json or 'pending', finished_at, reported, and
--         while pending, redo: the request another instance needs to take the task over)
-- ARGV[1] state json   ARGV[2] finished_at (ms)   ARGV[3] retention (ms)
-- ARGV[4] record json ('' when this instance has no copy)
-- ARGV[5] the channel that wakes readers waiting on other instances   ARGV[6] the task id
-- Returns: 1 when written, 2 when written again whole, 0 when already finished (or gone with no
--          copy).
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  if ARGV[4] == '' or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('HSET', KEYS[1], 'record', ARGV[4], 'state', ARGV[1], 'finished_at', ARGV[2],
    'reported', '0')
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  return 2
end
if state ~= 'pending' then return 0 end
-- The request kept for a take-over (it may hold an image) is no use once the task ended.
redis.call('HDEL', KEYS[1], 'redo')
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'finished_at', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
