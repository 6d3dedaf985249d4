-- take: a waiter's instance collects the mail delivered to it.
-- KEYS[1] mbox   KEYS[2] mlease
-- ARGV[1] waiter id
-- Returns: the mail, or nil when there is none (already taken, or passed on after its deadline).
local mail = redis.call('HGET', KEYS[1], ARGV[1])
if mail then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return mail
