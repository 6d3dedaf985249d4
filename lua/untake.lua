-- untake: mail a waiter's instance took but must not hand over, because that take's write was
-- not confirmed durable in time (durable hand-outs, docs/REDIS.md): it goes back to the waiter's
-- mailbox with a fresh deadline, for its instance to take again once writes are confirmed. Had
-- the take been lost (a failover to a replica that never saw it), the mail is there once all the
-- same.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] waiter id   ARGV[8] the mail as `take` returned it
-- Returns: {} (nothing to tell: the waiter's own instance takes it).
local r = replay()
if r then return r end
redis.call('HSET', mbox, ARGV[7], ARGV[8])
redis.call('ZADD', mlease, now + mail_ttl, ARGV[7])
redis.call('ZREM', gone, ARGV[7])
return done({})
