--[[
  inspect.lua: read buckets as they are at the server's now, for `aqueduct inspect`. Writes nothing.

  The stored `tokens` is the level at the bucket's last update; this script refills it to the current
  Redis TIME with the bucket's stored rate and capacity (the same arithmetic as acquire.lua), so what is
  shown is what an acquire would see now.

  KEYS[1..k]        bucket hashes; all in one Redis Cluster slot (one hash tag). Keys that are gone
                    (expired since they were found) or are not hashes are reported as missing.
  ARGV              none

  Returns, all as strings: { nowMicros, then 6 fields per key:
    present ('1' or '0'), tokensNow, rate, capacity, blockedUntilMs ('' when none is active), pttlMs }
  (for a missing key only present = '0' is meaningful; the other five are '')

  Error replies: none of its own.
]]

local function str(x)
  return string.format('%.17g', x)
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local result = { str(now) }
for i = 1, #KEYS do
  local key = KEYS[i]
  local base = 1 + (i - 1) * 6
  local state = nil
  if redis.call('TYPE', key).ok == 'hash' then
    state = redis.call('HMGET', key, 'tokens', 'ts', 'config', 'blocked_until')
  end
  local rate, capacity = nil, nil
  if state and state[3] then -- config is '<rate> <capacity> <minTtlSeconds>'
    local rate_text, capacity_text = string.match(state[3], '^(%S+) (%S+)')
    rate, capacity = tonumber(rate_text), tonumber(capacity_text)
  end
  if rate == nil or capacity == nil then
    -- A block written before the first acquire carries no rate or capacity yet: report it, level unknown.
    if state ~= nil and tonumber(state[4]) ~= nil then
      local block = tonumber(state[4])
      result[base + 1] = '1'
      result[base + 2] = ''
      result[base + 3] = ''
      result[base + 4] = ''
      result[base + 5] = block > now / 1000 and str(block) or ''
      result[base + 6] = str(redis.call('PTTL', key))
    else
      result[base + 1] = '0'
      for f = 2, 6 do result[base + f] = '' end
    end
  else
    local level = tonumber(state[1])
    local ts = tonumber(state[2])
    if level == nil or ts == nil then
      level = capacity
    else
      local elapsed = now - ts
      if elapsed < 0 then elapsed = 0 end
      level = level + elapsed * rate / 1000000
    end
    if level > capacity then level = capacity end
    local block = tonumber(state[4])
    result[base + 1] = '1'
    result[base + 2] = str(level)
    result[base + 3] = str(rate)
    result[base + 4] = str(capacity)
    result[base + 5] = (block ~= nil and block > now / 1000) and str(block) or ''
    result[base + 6] = str(redis.call('PTTL', key))
  end
end
return result
