-- queue_begin: before working on delivered entries, a whole batch in one call (each entry is
-- checked on its own, as if called once per entry). An entry whose task already has a result
-- (its first worker finished after its lease ran out, or died before acknowledging) is not
-- worked on again: acknowledged and removed here, unless it is kept, because its gateway task
-- record may still wait for that result (see queue_finish.lua); the worker finishes the record
-- from the result, then acknowledges the entry.
-- KEYS[1] tasks stream   KEYS[2..] result keys
-- ARGV[1] group   ARGV[2] consumer   then per entry: stream id, index in KEYS of its result key
-- (0 when the entry has no readable id), keep ('1' = leave a done entry pending)
-- Returns per entry two numbers: 0, 0 lease lost | 2, 0 result already there (acknowledged
-- unless kept) | 1, deliveries go ahead.
local out = {}
for i = 3, #ARGV, 3 do
  local id, key, keep = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2] == '1'
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #p == 0 then
    out[#out + 1] = 0
    out[#out + 1] = 0
  elseif key > 0 and redis.call('EXISTS', KEYS[key]) == 1 then
    if not keep then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
    end
    out[#out + 1] = 2
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
    out[#out + 1] = p[1][4]
  end
end
return out
