-- announce: tells an instance that mail waits for one of its waiters. One script, so the inbox
-- never exists without its expiry: a dead instance's inbox does not outlive the mail it
-- announces.
-- KEYS[1] inbox (LIST of "<target id> <waiter id>")
-- ARGV[1] message   ARGV[2] inbox ttl (ms)
-- Returns: 1.
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
