-- cover: after a dead instance's claims expired, or a stopping instance requeued its tasks,
-- waiters may outnumber running tasks. Claims as many new tasks as are missing (promise 3 after
-- a crash), up to the candidates given.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7..] candidate claim ids
-- Returns: {n, adopted 1..n, woken...}: start tasks under the first n candidates (each polls the
--          provider task it adopted, when not ''); tell the woken waiters.
local r = replay()
if r then return r end
touch()
local woken = reap()
local missing = redis.call('ZCARD', waiters) - redis.call('ZCARD', inflight)
local n, adoptions = claim_up_to(missing, 7)
return done(extend(extend({n}, adoptions), woken))
