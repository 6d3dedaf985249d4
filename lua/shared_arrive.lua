-- shared_arrive: one caller of a reusable target (promise 4). A cached answer with enough life
-- left is shared; otherwise the caller follows the one task solving it, or leads a new one under
-- a lock with a fencing token.
-- KEYS[1] cached answer (STRING "exp|json", expires by itself)   KEYS[2] lock (STRING token)
-- KEYS[3] fence counter   KEYS[4] followers (SET of waiter ids)
-- ARGV[1] min_expiry (ms)   ARGV[2] waiter id   ARGV[3] lock ttl (ms)
-- Returns: {1, answer json} cached | {2} follow | {3, token} lead.
local cached = redis.call('GET', KEYS[1])
if cached then
  local exp, json = string.match(cached, '^(%d+)|(.*)$')
  if exp and tonumber(exp) >= tonumber(ARGV[1]) then return {1, json} end
  redis.call('DEL', KEYS[1])
end
redis.call('SADD', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return {2} end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[2], token, 'PX', tonumber(ARGV[3]))
return {3, token}
