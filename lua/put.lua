-- put: answers obtained elsewhere (an import, a refill's answer) for a single-use target: the
-- oldest waiter, else the pool.
-- KEYS: the target prelude's seven keys.
-- ARGV[1] now (ms)   ARGV[2] mail "A|exp|json"   ARGV[3] mail ttl (ms)
-- Returns: the waiters that got mail (their instances must be told).
local now, mail_ttl = tonumber(ARGV[1]), tonumber(ARGV[3])
touch(now)
local woken = reap(now, '1', mail_ttl)
local w = place(ARGV[2], '1', now, mail_ttl)
if w then table.insert(woken, w) end
return woken
