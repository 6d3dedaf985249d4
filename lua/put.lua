-- put: an answer obtained elsewhere (an import, a pooled answer whose caller left or whose
-- hand-out was withheld) for a single-use target: the oldest waiter, else the pool. An answer
-- already in the pool stays there once: the JSON is the answer's identity (no instance's clock
-- in it), so an answer put back after a failover undid its take finds its original here and
-- adds nothing, and no waiter gets a copy of a pooled answer.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] remaining ms   ARGV[8] answer json
-- Returns: the waiters that got mail (their instances must be told).
local r = replay()
if r then return r end
touch()
local woken = reap()
if redis.call('ZSCORE', pool, ARGV[8]) then return done(woken) end
local w = place(answer_mail(ARGV[7], ARGV[8]))
if w then table.insert(woken, w) end
return done(woken)
