-- finish: an upstream task for a single-use target ended. An answer goes to the oldest waiter,
-- else the pool; a failure goes to the oldest waiter no remaining task covers; a stale answer
-- (less than min_remaining left here) is waste, and restarts a task when a waiter is left
-- uncovered; a requeued task (its instance is stopping) delivers nothing, and the uncovered
-- waiter's own instance starts a task for it (cover.lua); a withdrawn task (never submitted, its
-- caller gone) cost nothing, and restarts a task when a waiter is left uncovered, like a stale
-- one but without counting waste. The claim is marked finished, so a
-- renewal racing this script never brings it back. A claim whose provider task another claim
-- adopted (its instance was away past its lease) delivers nothing: the adopter delivers.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] the task's claim id   ARGV[8] outcome: 'A' | 'F' | 'S' | 'R' | 'W'
-- ARGV[9] remaining ms (for 'A')   ARGV[10] answer json ('A') or failure json ('F')
-- ARGV[11] claim id for a restart
-- Returns: {restart (0/1), woken...}: whether to start a task under ARGV[11], and the waiters
--          that got mail (their instances must be told).
local r = replay()
if r then return r end
touch()
redis.call('ZREM', inflight, ARGV[7])
-- Finished before: a repeat (its first outcome was unknown to its instance, see `refinish` in
-- single.rs) delivers nothing. An adopted claim is marked too; it goes on below.
if redis.call('ZSCORE', fin, ARGV[7]) and not redis.call('ZSCORE', adopted, ARGV[7]) then
  return done(extend({0}, reap()))
end
local note = redis.call('HGET', notes, ARGV[7])
if ARGV[8] == 'R' and note and not redis.call('ZSCORE', adopted, ARGV[7]) then
  -- Handed back by a stopping instance: the provider is still solving it, and the claim that
  -- covers its waiter next adopts it.
  redis.call('ZADD', orphans, tonumber(string.match(note, '^(%d+)')), ARGV[7])
else
  redis.call('HDEL', notes, ARGV[7])
  redis.call('ZREM', orphans, ARGV[7])
end
mark(fin, ARGV[7])
local woken = reap()
if redis.call('ZSCORE', adopted, ARGV[7]) then return done(extend({0}, woken)) end
local restart = 0
local outcome = ARGV[8]
local mail = ''
if outcome == 'A' then
  mail = answer_mail(ARGV[9], ARGV[10])
  if answer_of(mail) < min_expiry then outcome = 'S' end
end
if outcome == 'A' then
  local w = place(mail)
  if w then table.insert(woken, w) end
elseif outcome == 'F' then
  if redis.call('ZCARD', waiters) > redis.call('ZCARD', inflight) then
    local w = hand_to_oldest('F|' .. ARGV[10])
    if w then table.insert(woken, w) end
  end
elseif outcome == 'S' or outcome == 'W' then
  if outcome == 'S' then incr('expired_unused', 1) end
  if redis.call('ZCARD', waiters) > redis.call('ZCARD', inflight) then
    redis.call('ZADD', inflight, now + lease, ARGV[11])
    incr('new_tasks', 1)
    restart = 1
  end
end
return done(extend({restart}, woken))
