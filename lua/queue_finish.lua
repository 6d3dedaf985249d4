-- queue_finish: ends delivered entries, a whole batch in one call (each entry on its own, in
-- order, as if called once per entry). With a result key: writes the result once (SET NX) and
-- tells waiters; with a reason: also copies the entry to the dead-letter stream. Then XACK and
-- XDEL, in that order (never XDEL an unacknowledged entry: Redis would drop it from the pending
-- list silently), unless the entry is kept: a task with a gateway task record keeps its entry
-- pending until that record is finished from the result written here (another key, maybe on
-- another Cluster node), and a second call without a result acknowledges it; if the worker
-- dies in between, the entry's next delivery finds the result and finishes the record then.
-- An entry this consumer no longer owns is left alone: its new owner finishes it.
-- KEYS[1] tasks stream   KEYS[2] dead-letter stream   KEYS[3..] result keys
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] result TTL (ms)   ARGV[4] wake-up channel
-- ARGV[5] dead-letter stream length bound
-- then per entry: stream id, index in KEYS of its result key (0: no result), task id, result
-- json, dead-letter reason ('' = none), keep ('1' = leave it pending), n, then n field,
-- value... of the entry (dead only).
-- Returns per entry: 1 written, 2 a result was already there (acknowledged only), 0 lease lost.
local out = {}
local i = 6
while i <= #ARGV do
  local id, key, task, json, reason = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
    ARGV[i + 4]
  local keep = ARGV[i + 5] == '1'
  local n = tonumber(ARGV[i + 6])
  local first, last = i + 7, i + 6 + 2 * n
  i = last + 1
  local outcome = 0
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #p > 0 then
    outcome = 1
    if key > 0 then
      if redis.call('SET', KEYS[key], json, 'NX', 'PX', ARGV[3]) then
        redis.call('PUBLISH', ARGV[4], task)
      else
        outcome = 2
      end
    end
    if reason ~= '' and outcome == 1 then
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'reason', reason, 'worker',
        ARGV[2], 'stream_id', id, unpack(ARGV, first, last))
    end
    if not keep then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
    end
  end
  out[#out + 1] = outcome
end
return out
