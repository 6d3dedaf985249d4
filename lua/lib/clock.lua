-- Redis server time in ms (`TIME`), so instance clocks never matter (a skewed one must not
-- shorten a lease or a lifetime); a time given by the caller only for a store set to an explicit
-- clock (tests of the store's promises on a clock they control). Prepended at build time to every script that reads the time.
local function clock(given)
  local t = tonumber(given)
  if t then return t end
  local r = redis.call('TIME')
  return tonumber(r[1]) * 1000 + math.floor(tonumber(r[2]) / 1000)
end
