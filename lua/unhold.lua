-- unhold: an instance ends a local claim batch without a caller's arrival to carry it (its hold
-- is nearly over, it is stopping, or the pool hit that took the batch was withheld or undone):
-- what it did not hand out goes back. Safe to run twice (a batch ends once), so it records no
-- reply.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] batch id   ARGV[8] how many of its answers the instance handed out
-- Returns: the waiters that got an answer (their instances must be told).
local woken = {}
release(ARGV[7], tonumber(ARGV[8]), woken)
return woken
