-- Binds an idempotency key to a task (docs/API.md "Idempotency keys"), compare-and-set:
-- only when the key is unbound (ARGV[1] = '') or still bound to ARGV[1], so two instances
-- binding the same key at once never both win, and a takeover replaces only the binding it read.
-- KEYS[1] the binding; ARGV[1] the expected value ('' = unbound), ARGV[2] the new value,
-- ARGV[3] its time to live in ms. Returns 1 when bound, 0 when the binding was something else.
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
