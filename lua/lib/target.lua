-- Shared prelude of every single-use target script (prepended at build time, so each script
-- stays one EVAL). All keys carry the target's hash tag, so they live in one Cluster slot.
--
-- KEYS[1] pool      ZSET  answer json -> expires_at (ms, Redis time)
-- KEYS[2] waiters   ZSET  waiter id -> arrival (ms): FIFO, oldest first
-- KEYS[3] wlease    ZSET  waiter id -> lease end (ms): renewed by the waiter's instance
-- KEYS[4] inflight  ZSET  claim id -> lease end (ms): one per running upstream task
-- KEYS[5] mbox      HASH  waiter id -> mail: delivered, not yet taken by its instance
-- KEYS[6] mlease    ZSET  waiter id -> deadline (ms) for taking its mail
-- KEYS[7] stats     HASH  counters behind the hit-rate and waste figures; `label`; `last`
--                         (ms of the last use, for retire.lua); `pk` ('1' when poolable)
-- KEYS[8] op        STRING this operation's recorded reply (JSON), kept for ARGV[1] ms
-- KEYS[9] fin       ZSET  claim id -> when its task finished: renewal never brings it back
-- KEYS[10] gone     ZSET  waiter id -> when it was served or left: renewal never brings it back
-- KEYS[11] notes    HASH  claim id -> "<keep until (ms)>\n<account>\n<provider task id>": the
--                         provider task a claim's instance submitted (`note.lua`)
-- KEYS[12] orphans  ZSET  claim id -> keep until (ms): claims that lapsed with a noted provider
--                         task, which the next claim of the target adopts instead of submitting
-- KEYS[13] adopted  ZSET  claim id -> keep until (ms): orphans another claim adopted; their own
--                         instance (it was only paused) must deliver nothing for them
-- KEYS[14] held     HASH  batch id -> the mails of pooled answers one instance took at once to
--                         hand out from memory (a local claim batch), JSON array in pool order
-- KEYS[15] holds    ZSET  batch id -> lease end (ms): an instance releases its batch before this
--                         (what it did not hand out goes back); one still held after it is waste
--
-- ARGV[1] op ttl (ms)   ARGV[2] min_remaining (ms)   ARGV[3] mail ttl (ms)   ARGV[4] lease (ms)
-- ARGV[5] poolable: '1' | '0' | '' (not known to the caller: as recorded in stats)
-- ARGV[6] '' in production; a time in ms only for a store set to an explicit clock (tests of
--         the store's promises on a clock they control)
-- ARGV[7] when the operation was issued (ms, Redis time as its instance last read it, never
--         later than the truth), or '' when its instance does not know Redis's time yet
-- ARGV[8..] the script's own arguments. The prelude takes ARGV[7] out of the table, so each
--         script reads its own arguments from ARGV[7] on (its header numbers them so).
--
-- Every time is Redis server time (TIME), so instance clocks do not matter.
-- Answers arrive as their remaining life in ms and are stamped with an expiry in Redis time.
-- Mail: "A|<expires_at>|<answer json>" (an answer) or "F|<failure json>" (a terminal failure).
--
-- Operations whose reply may be lost call `replay()` first and end with `done(reply)`: run again
-- under the same op id, they return the recorded reply and change nothing. Run again after its
-- record may have expired, an operation refuses (error `CGEXPIRED`) instead of running afresh:
-- its first run may have happened and been seen by others.

local pool, waiters, wlease, inflight = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mbox, mlease, stats = KEYS[5], KEYS[6], KEYS[7]
local opkey, fin, gone = KEYS[8], KEYS[9], KEYS[10]
local notes, orphans, adopted = KEYS[11], KEYS[12], KEYS[13]
local held, holds = KEYS[14], KEYS[15]
local op_ttl, min_rem = tonumber(ARGV[1]), tonumber(ARGV[2])
local mail_ttl, lease = tonumber(ARGV[3]), tonumber(ARGV[4])
local issued = tonumber(table.remove(ARGV, 7))

local now = clock(ARGV[6])
local min_expiry = now + min_rem

-- How much sooner than its record's lifetime an operation refuses to run: room for the clocks of
-- Cluster nodes to differ a little (its issue time may have been read from another node).
local expiry_margin = math.min(2000, math.floor(op_ttl / 4))

-- Poolability is recorded by every caller that knows the target's kind, so scripts run by an
-- instance that does not (mail passed on after its deadline) still never pool a GeeTest answer.
local poolable = ARGV[5]
if poolable == '1' or poolable == '0' then
  if redis.call('HGET', stats, 'pk') ~= poolable then redis.call('HSET', stats, 'pk', poolable) end
else
  poolable = redis.call('HGET', stats, 'pk') or '0'
end

local function replay()
  local rec = redis.call('GET', opkey)
  if rec then
    -- A write, so a `WAIT` sent after this replay covers the first run's effects too; and the
    -- record lives on as long as it is still being asked for.
    redis.call('PEXPIRE', opkey, op_ttl)
    return cjson.decode(rec)
  end
  if issued and now - issued >= op_ttl - expiry_margin then
    return redis.error_reply('CGEXPIRED operation older than its record may live')
  end
  return nil
end

local function done(reply)
  redis.call('SET', opkey, cjson.encode(reply), 'PX', op_ttl)
  return reply
end

-- Marks the target used now: retire.lua forgets only targets unused for a while.
local function touch()
  redis.call('HSET', stats, 'last', now)
end

local function incr(field, n)
  if n ~= 0 then redis.call('HINCRBY', stats, field, n) end
end

-- Records that `id` must never be restored by renewal, and forgets such records older than an
-- op's lifetime (no instance renews an entry that long after it ended).
local function mark(set, id)
  redis.call('ZADD', set, now, id)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', '(' .. (now - op_ttl))
end

-- expires_at and answer json of an answer mail, or nil for a failure mail.
local function answer_of(mail)
  local exp, json = string.match(mail, '^A|(%d+)|(.*)$')
  if exp then return tonumber(exp), json end
  return nil
end

-- The mail of an answer that had `remaining` ms of life left when the operation was issued: a
-- retry that runs later (its first try was refused, or its reply lost) must not add its delay to
-- the answer's life. Issue times are never ahead of Redis's clock; `now` bounds one read from a
-- node whose clock runs ahead of this one's.
local function answer_mail(remaining, json)
  local from = issued and math.min(issued, now) or now
  return 'A|' .. (from + tonumber(remaining)) .. '|' .. json
end

-- Hands mail to the oldest waiter. Returns its id, or false when nobody waits.
local function hand_to_oldest(mail)
  local oldest = redis.call('ZRANGE', waiters, 0, 0)[1]
  if not oldest then return false end
  redis.call('ZREM', waiters, oldest)
  redis.call('ZREM', wlease, oldest)
  redis.call('HSET', mbox, oldest, mail)
  redis.call('ZADD', mlease, now + mail_ttl, oldest)
  return oldest
end

-- An answer with no caller attached: the oldest waiter, else the pool (poolable kinds only),
-- else it is waste. One with less than min_remaining left is waste at every hand-off, not
-- only once expired. Returns the waiter that got it, or false.
local function place(mail)
  local exp, json = answer_of(mail)
  if not exp then return false end
  if exp < min_expiry then
    incr('expired_unused', 1)
    return false
  end
  local w = hand_to_oldest(mail)
  if w then return w end
  if poolable == '1' then
    redis.call('ZADD', pool, exp, json)
  else
    incr('expired_unused', 1)
  end
  return false
end

-- Forgets waiters and claims whose instance stopped renewing them (it died, or was cut off
-- longer than a lease: its renewal restores what is still live), and passes on mail nobody took
-- in time. Returns the waiters that got passed-on mail.
local function reap()
  local woken = {}
  -- A batch still held after its lease: its instance died or paused past it, and may have handed
  -- out any of its answers, so none goes back; all count as waste (pessimistically: some may
  -- have reached callers) and no longer as hits.
  for _, b in ipairs(redis.call('ZRANGEBYSCORE', holds, '-inf', '(' .. now)) do
    local mails = redis.call('HGET', held, b)
    if mails then
      local n = #cjson.decode(mails)
      incr('expired_unused', n)
      incr('pool_hits', -n)
    end
    redis.call('HDEL', held, b)
    redis.call('ZREM', holds, b)
  end
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', wlease, '-inf', '(' .. now)) do
    redis.call('ZREM', waiters, w)
    redis.call('ZREM', wlease, w)
  end
  for _, c in ipairs(redis.call('ZRANGEBYSCORE', inflight, '-inf', '(' .. now)) do
    redis.call('ZREM', inflight, c)
    local note = redis.call('HGET', notes, c)
    if note then redis.call('ZADD', orphans, tonumber(string.match(note, '^(%d+)')), c) end
  end
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', mlease, '-inf', '(' .. now)) do
    local mail = redis.call('HGET', mbox, w)
    redis.call('HDEL', mbox, w)
    redis.call('ZREM', mlease, w)
    mark(gone, w)
    if mail then
      local next = place(mail)
      if next then table.insert(woken, next) end
    end
  end
  return woken
end

-- Drops pooled answers with less life left than a caller needs; they count as waste.
local function drop_stale()
  incr('expired_unused', redis.call('ZREMRANGEBYSCORE', pool, '-inf', '(' .. min_expiry))
end

-- Pooled answers go to waiters first: after a renewal restored waiters that a lapse removed,
-- both may be present at once. Appends the waiters served to `woken`.
local function settle(woken)
  drop_stale()
  while redis.call('ZCARD', waiters) > 0 do
    local top = redis.call('ZRANGE', pool, 0, 0, 'WITHSCORES')
    if #top == 0 then break end
    redis.call('ZREM', pool, top[1])
    table.insert(woken, hand_to_oldest('A|' .. top[2] .. '|' .. top[1]))
  end
end

-- Gives the new claim `c` the provider task of a claim whose instance stopped renewing it (it
-- died), if one is still within its keep time: `c`'s task polls that instead of submitting, so a
-- crash does not pay for the same work twice. The adopted claim counts as finished (renewal never
-- brings it back) and its own late outcome is dropped (finish.lua). Returns the note, or ''.
local function adopt(c)
  if redis.call('ZCARD', orphans) == 0 then return '' end
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', orphans, '-inf', '(' .. now)) do
    redis.call('HDEL', notes, old)
  end
  redis.call('ZREMRANGEBYSCORE', orphans, '-inf', '(' .. now)
  redis.call('ZREMRANGEBYSCORE', adopted, '-inf', '(' .. now)
  local old = redis.call('ZRANGE', orphans, 0, 0)[1]
  if not old then return '' end
  local note = redis.call('HGET', notes, old)
  redis.call('ZREM', orphans, old)
  redis.call('HDEL', notes, old)
  if not note then return '' end
  redis.call('ZADD', adopted, tonumber(string.match(note, '^(%d+)')), old)
  mark(fin, old)
  -- Noted under the new claim too: if its instance dies as well, the task is adopted again.
  redis.call('HSET', notes, c, note)
  incr('adopted', 1)
  return note
end

-- Claims in flight, for tasks to start, the first `missing` candidate ids of ARGV from index
-- `first` on (none when nothing is missing). Returns how many it claimed, and for each the
-- provider task it adopted (`adopt`) or ''.
local function claim_up_to(missing, first)
  local n, adoptions = 0, {}
  for i = first, #ARGV do
    if n >= missing then break end
    redis.call('ZADD', inflight, now + lease, ARGV[i])
    table.insert(adoptions, adopt(ARGV[i]))
    n = n + 1
  end
  incr('new_tasks', n)
  return n, adoptions
end

-- `list` with the elements of `more` appended.
local function extend(list, more)
  for _, v in ipairs(more) do table.insert(list, v) end
  return list
end

-- Ends batch `b`: its instance handed out its first `served` answers; the rest are placed again
-- (the oldest waiter, else the pool, else waste) and stop counting as hits. A batch already
-- ended or reaped is left alone, so running this twice changes nothing more. Appends the
-- waiters that got an answer to `woken`.
local function release(b, served, woken)
  if b == '' then return end
  local mails = redis.call('HGET', held, b)
  if not mails then return end
  redis.call('HDEL', held, b)
  redis.call('ZREM', holds, b)
  mails = cjson.decode(mails)
  local back = 0
  for i = served + 1, #mails do
    back = back + 1
    local w = place(mails[i])
    if w then table.insert(woken, w) end
  end
  incr('pool_hits', -back)
end

-- Takes up to `n` more pooled answers for batch `b`, held until `hold_ms` from now: only answers
-- that keep min_remaining through the hold, and never more than half of what the pool keeps, so
-- other instances' callers still find answers there. They count as hits now (a release gives
-- back what was not handed out). Returns their mails in pool order.
local function hold(b, n, hold_ms)
  if n <= 0 or b == '' then return {} end
  n = math.min(n, math.floor(redis.call('ZCARD', pool) / 2))
  if n <= 0 then return {} end
  local top = redis.call('ZRANGEBYSCORE', pool, min_expiry + hold_ms, '+inf', 'WITHSCORES',
    'LIMIT', 0, n)
  local mails, taken = {}, {}
  for i = 1, #top, 2 do
    taken[#taken + 1] = top[i]
    mails[#mails + 1] = 'A|' .. top[i + 1] .. '|' .. top[i]
  end
  if #mails == 0 then return mails end
  -- One call for the batch: a call per answer was most of the script's own time.
  redis.call('ZREM', pool, unpack(taken))
  redis.call('HSET', held, b, cjson.encode(mails))
  redis.call('ZADD', holds, now + hold_ms, b)
  incr('pool_hits', #mails)
  return mails
end
