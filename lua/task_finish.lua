-- task_finish: writes a task record's result once (promise 6); a second finish changes nothing.
-- KEYS[1] task record (HASH: record json, state json or 'pending', finished_at, reported)
-- ARGV[1] state json   ARGV[2] finished_at (ms)   ARGV[3] retention (ms)
-- Returns: 1 when written, 0 when the record is gone or already finished.
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'finished_at', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
