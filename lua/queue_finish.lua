-- queue_finish: ends a delivered entry. With a result key: writes the result once (SET NX) and
-- tells waiters; with a reason: also copies the entry to the dead-letter stream. Then XACK and
-- XDEL, in that order (never XDEL an unacknowledged entry: Redis would drop it from the pending
-- list silently). An entry this consumer no longer owns is left alone: its new owner finishes it.
-- KEYS[1] tasks stream   KEYS[2] dead-letter stream   KEYS[3] result key (absent: no result)
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] stream id   ARGV[4] dead-letter reason ('' = none)
-- ARGV[5] result json   ARGV[6] result TTL (ms)   ARGV[7] wake-up channel   ARGV[8] task id
-- ARGV[9] dead-letter stream length bound   ARGV[10..] the entry's field, value... (dead only)
-- Returns: 1 written, 2 a result was already there (acknowledged only), 0 lease lost.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 0 then return 0 end
local outcome = 1
if #KEYS == 3 then
  if redis.call('SET', KEYS[3], ARGV[5], 'NX', 'PX', ARGV[6]) then
    redis.call('PUBLISH', ARGV[7], ARGV[8])
  else
    outcome = 2
  end
end
if ARGV[4] ~= '' and outcome == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', 'reason', ARGV[4], 'worker', ARGV[2],
    'stream_id', ARGV[3], unpack(ARGV, 10))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return outcome
