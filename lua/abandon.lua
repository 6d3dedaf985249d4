-- abandon: a caller stopped waiting. It leaves the queue; an answer that already reached it
-- (passed in, or still in its mailbox) goes to the next waiter or the pool, so a caller that
-- gives up wastes nothing (promise 3).
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)   ARGV[2] waiter id   ARGV[3] mail the caller had taken, or ''
-- ARGV[4] poolable ('1'/'0')   ARGV[5] mail ttl (ms)
-- Returns: the waiters that got mail (their instances must be told).
local now, mail_ttl = tonumber(ARGV[1]), tonumber(ARGV[5])
touch(now)
redis.call('ZREM', waiters, ARGV[2])
redis.call('ZREM', wlease, ARGV[2])
local woken = {}
local pending = redis.call('HGET', mbox, ARGV[2])
if pending then
  redis.call('HDEL', mbox, ARGV[2])
  redis.call('ZREM', mlease, ARGV[2])
end
for _, mail in ipairs({ARGV[3], pending or ''}) do
  if mail ~= '' then
    local w = place(mail, ARGV[4], now, mail_ttl)
    if w then table.insert(woken, w) end
  end
end
return woken
