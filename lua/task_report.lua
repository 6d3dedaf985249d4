-- task_report: marks a task as reported, once.
-- KEYS[1] task record (HASH)
-- Returns: 1 when this call marked it, 0 when it was already reported or is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'reported') == '1' then return 0 end
redis.call('HSET', KEYS[1], 'reported', '1')
return 1
