--[[
  server-time.lua: the Redis server's clock, the only clock the limiter uses (a caller's never is).
]]

-- Now in µs since the epoch (TIME): as a number, and as its exact decimal text (built without
-- string.format, which runs sprintf).
local function server_time()
  local time = redis.call('TIME')
  local seconds, micros = time[1], time[2]
  if #micros < 6 then micros = string.rep('0', 6 - #micros) .. micros end
  return seconds * 1000000 + micros, seconds .. micros
end
