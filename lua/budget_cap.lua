-- budget_cap: ARGV[6] 'shrink' after a provider capacity error: halve the cap (never below one),
-- unless it was cut less than ARGV[7] ms ago (one burst of refusals is one signal; a replay
-- inside that gap changes nothing). ARGV[6] 'plan': the plan has ARGV[7] threads (threadsinfo).
-- The hash lives ARGV[8] ms after its last change: an idle account's cut is forgotten.
-- Returns {cap}.
local mode, arg, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
if mode == 'shrink' then
  local at = tonumber(redis.call('HGET', KEYS[6], 'cut_at'))
  if not at or now - at >= arg then
    redis.call('HSET', KEYS[6], 'after_cut', math.max(1, math.floor(effective_cap() / 2)), 'cut_at', now)
  end
elseif mode == 'plan' and arg and arg > 0 then
  redis.call('HSET', KEYS[6], 'plan', arg)
end
redis.call('PEXPIRE', KEYS[6], ttl)
return {effective_cap()}
