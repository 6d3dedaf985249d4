-- budget_cap: ARGV[6] 'refused' after the provider refused, for want of capacity, the task
-- holding lease ARGV[9], when it had lately accepted one with ARGV[10] other tasks of ours in
-- flight: the cap drops to the leases held besides the refused one (never below one) when that
-- is the plan's size (`refusal_is_plan`), unless it was cut less than ARGV[7] ms ago (one burst
-- of refusals is one signal; a replay inside that gap changes nothing). ARGV[6] 'plan': the
-- plan has ARGV[7] threads (threadsinfo). The hash lives ARGV[8] ms after its last change: an
-- idle account's cut is forgotten.
-- Returns {cap}.
local mode, arg, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
if mode == 'refused' then
  local at = tonumber(redis.call('HGET', KEYS[6], 'cut_at'))
  if not at or now - at >= arg then
    if reap() > 0 then redis.call('PUBLISH', ARGV[5], '1') end
    local others = redis.call('ZCARD', KEYS[1])
    if redis.call('ZSCORE', KEYS[1], ARGV[9]) then others = others - 1 end
    local cap = effective_cap()
    local to = math.max(others, 1)
    if refusal_is_plan(others, tonumber(ARGV[10]), cap) and to < cap then
      redis.call('HSET', KEYS[6], 'after_cut', to, 'cut_at', now)
    end
  end
elseif mode == 'plan' and arg and arg > 0 then
  redis.call('HSET', KEYS[6], 'plan', arg)
end
redis.call('PEXPIRE', KEYS[6], ttl)
return {effective_cap()}
