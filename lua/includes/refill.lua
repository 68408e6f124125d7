--[[
  refill.lua: the token bucket's arithmetic, shared by every script that reads a level
  (acquire.lua, refund.lua, inspect.lua).
]]

-- A bucket's level at `now` (µs): `level` tokens at `ts` (µs) plus what `rate` tokens/s refilled since,
-- at most `capacity`. Without a level or ts the bucket is new (or expired) and starts full; a server
-- clock that stepped back (e.g. after a failover) refills nothing.
local function refilled(level, ts, now, rate, capacity)
  if not (level and ts) then return capacity end
  if now > ts then level = level + (now - ts) * rate / 1000000 end
  if level > capacity then return capacity end
  return level
end
