-- note: an upstream task of a claim got its provider task id. Recorded while the claim is in
-- flight, so that if its instance dies another claim of the target adopts (polls) the provider
-- task instead of submitting the same work again (`adopt` in the prelude). A note arriving after
-- its claim finished or lapsed changes nothing. Safe to run twice.
-- KEYS, ARGV[1..6]: the target prelude's.
-- ARGV[7] claim id   ARGV[8] keep (ms): how long the task may still be adopted
-- ARGV[9] account   ARGV[10] provider task id
-- Returns: {1} noted | {0} the claim is no longer in flight.
if not redis.call('ZSCORE', inflight, ARGV[7]) then return {0} end
redis.call('HSET', notes, ARGV[7], (now + tonumber(ARGV[8])) .. '\n' .. ARGV[9] .. '\n' .. ARGV[10])
return {1}
