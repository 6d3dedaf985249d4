-- put: an answer obtained elsewhere (an import, a pooled answer whose caller left) for a
-- single-use target: the oldest waiter, else the pool.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] remaining ms   ARGV[8] answer json
-- Returns: the waiters that got mail (their instances must be told).
local r = replay()
if r then return r end
touch()
local woken = reap()
local w = place(answer_mail(ARGV[7], ARGV[8]))
if w then table.insert(woken, w) end
return done(woken)
