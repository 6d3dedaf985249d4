-- Shared prelude of every single-use target script (prepended at build time, so each script
-- stays one EVAL). All keys carry the target's hash tag, so they live in one Cluster slot.
--
-- KEYS[1] pool      ZSET  answer json -> expires_at (ms)
-- KEYS[2] waiters   ZSET  waiter id -> arrival (ms): FIFO, oldest first
-- KEYS[3] wlease    ZSET  waiter id -> lease end (ms): renewed by the waiter's instance
-- KEYS[4] inflight  ZSET  claim id -> lease end (ms): one per running upstream task
-- KEYS[5] mbox      HASH  waiter id -> mail: delivered, not yet taken by its instance
-- KEYS[6] mlease    ZSET  waiter id -> deadline (ms) for taking its mail
-- KEYS[7] stats     HASH  counters behind the hit-rate and waste figures; `label`; `last`
--                         (ms of the last use, for retire.lua)
--
-- Mail: "A|<expires_at>|<answer json>" (an answer) or "F|<failure json>" (a terminal failure).

local pool, waiters, wlease, inflight = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mbox, mlease, stats = KEYS[5], KEYS[6], KEYS[7]

-- Marks the target used at `now`: retire.lua forgets only targets unused for a while.
local function touch(now)
  redis.call('HSET', stats, 'last', now)
end

local function incr(field, n)
  if n ~= 0 then redis.call('HINCRBY', stats, field, n) end
end

-- expires_at and answer json of an answer mail, or nil for a failure mail.
local function answer_of(mail)
  local exp, json = string.match(mail, '^A|(%d+)|(.*)$')
  if exp then return tonumber(exp), json end
  return nil
end

-- Hands mail to the oldest waiter. Returns its id, or false when nobody waits.
local function hand_to_oldest(mail, now, mail_ttl)
  local oldest = redis.call('ZRANGE', waiters, 0, 0)[1]
  if not oldest then return false end
  redis.call('ZREM', waiters, oldest)
  redis.call('ZREM', wlease, oldest)
  redis.call('HSET', mbox, oldest, mail)
  redis.call('ZADD', mlease, now + mail_ttl, oldest)
  return oldest
end

-- An answer with no caller attached: the oldest waiter, else the pool, else it is waste.
-- Returns the waiter that got it, or false.
local function place(mail, poolable, now, mail_ttl)
  local exp, json = answer_of(mail)
  if not exp then return false end
  if exp <= now then
    incr('expired_unused', 1)
    return false
  end
  local w = hand_to_oldest(mail, now, mail_ttl)
  if w then return w end
  if poolable == '1' then
    redis.call('ZADD', pool, exp, json)
  else
    incr('expired_unused', 1)
  end
  return false
end

-- Forgets waiters and claims whose instance stopped renewing them (it died), and passes on
-- mail nobody took in time. Returns the waiters that got passed-on mail.
local function reap(now, poolable, mail_ttl)
  local woken = {}
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', wlease, '-inf', '(' .. now)) do
    redis.call('ZREM', waiters, w)
    redis.call('ZREM', wlease, w)
  end
  redis.call('ZREMRANGEBYSCORE', inflight, '-inf', '(' .. now)
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', mlease, '-inf', '(' .. now)) do
    local mail = redis.call('HGET', mbox, w)
    redis.call('HDEL', mbox, w)
    redis.call('ZREM', mlease, w)
    if mail then
      local next = place(mail, poolable, now, mail_ttl)
      if next then table.insert(woken, next) end
    end
  end
  return woken
end

-- Drops pooled answers with less life left than a caller needs; they count as waste.
local function drop_stale(min_expiry)
  incr('expired_unused', redis.call('ZREMRANGEBYSCORE', pool, '-inf', '(' .. min_expiry))
end
