-- abandon: a caller stopped waiting. It leaves the queue for good; an answer that already
-- reached it (passed in, or still in its mailbox) goes to the next waiter or the pool, so a
-- caller that gives up wastes nothing (promise 3).
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] waiter id   ARGV[8] remaining ms of the answer the caller had taken (or '')
-- ARGV[9] that answer's json (or '')
-- Returns: the waiters that got mail (their instances must be told).
local r = replay()
if r then return r end
touch()
redis.call('ZREM', waiters, ARGV[7])
redis.call('ZREM', wlease, ARGV[7])
mark(gone, ARGV[7])
local woken = {}
local mails = {}
if ARGV[9] ~= '' then table.insert(mails, answer_mail(ARGV[8], ARGV[9])) end
local pending = redis.call('HGET', mbox, ARGV[7])
if pending then
  redis.call('HDEL', mbox, ARGV[7])
  redis.call('ZREM', mlease, ARGV[7])
  table.insert(mails, pending)
end
for _, mail in ipairs(mails) do
  local w = place(mail)
  if w then table.insert(woken, w) end
end
return done(woken)
