-- queue_forget: deletes the group's consumers that hold nothing and were silent for at least
-- ARGV[3] ms, all but the caller. One step, because `XGROUP DELCONSUMER` drops a consumer's
-- pending entries with it: a worker that resumed and read entries between a separate look and
-- the deletion would lose them for good (they are in no pending list, so nobody reclaims them).
-- KEYS[1] tasks stream
-- ARGV[1] group   ARGV[2] the caller's consumer (never deleted)   ARGV[3] silence (ms)
-- Returns how many consumers were deleted.
local silent = tonumber(ARGV[3])
local deleted = 0
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #consumer, 2 do f[consumer[i]] = consumer[i + 1] end
  if f.name ~= ARGV[2] and f.pending == 0 and f.idle >= silent then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f.name)
    deleted = deleted + 1
  end
end
return deleted
