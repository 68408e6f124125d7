--[[
  refund.lua: give unused tokens back to every bucket, never above its capacity.

  A caller that was granted tokens and then could not use them (a send failed before reaching the
  provider, a batch turned out smaller) returns them here. Each bucket is first refilled to now
  (Redis TIME, as in acquire.lua) and then topped up by n, capped at its capacity, so a refund can never
  create a burst the bucket could not have held.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag)
  ARGV[1]           n: tokens to give back, an integer >= 0
  ARGV[2]           minTtlSeconds: an integer >= 1, the shortest TTL given to a bucket
  ARGV[1 + 2i]      rate of KEYS[i] in tokens/s, a finite number > 0 (may be fractional)
  ARGV[2 + 2i]      capacity of KEYS[i], a finite number >= 1

  Hash fields:      writes tokens, ts, config (as acquire.lua); reads blocked_until (for the TTL only)
  TTL:              as acquire.lua: max(minTtlSeconds, ceil(2 * capacity / rate), until its block ends + 1 s),
                    always renewed (which keeps acquire.lua's renewal rule sound: ts is a renewal too)

  Returns, all as strings: { nowMicros, tokensLeft[1], ..., tokensLeft[k] }

  Error replies (nothing is written):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 2 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
]]

local MAX_TTL_SECONDS = 2147483647

local function bad(argument, message)
  return redis.error_reply('AQUEDUCT_ARGUMENT ' .. argument .. ' ' .. message)
end

local function finite(x)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge
end

local function str(x)
  return string.format('%.17g', x)
end

local k = #KEYS
if k == 0 then
  return bad('buckets', 'must name at least one bucket key')
end
if #ARGV ~= 2 + 2 * k then
  return bad('buckets', string.format(
    '%d keys need %d ARGV (n, minTtlSeconds, then rate and capacity per key), got %d', k, 2 + 2 * k, #ARGV))
end

local n = tonumber(ARGV[1])
if not (finite(n) and n >= 0 and n == math.floor(n)) then
  return bad('n', 'must be an integer >= 0, got "' .. ARGV[1] .. '"')
end
local min_ttl = tonumber(ARGV[2])
if not (finite(min_ttl) and min_ttl >= 1 and min_ttl == math.floor(min_ttl)) then
  return bad('minTtlSeconds', 'must be an integer >= 1, got "' .. ARGV[2] .. '"')
end
local rates, capacities = {}, {}
for i = 1, k do
  local rate = tonumber(ARGV[1 + 2 * i])
  if not (finite(rate) and rate > 0) then
    return bad('rate', 'of ' .. KEYS[i] .. ' must be a finite number > 0, got "' .. ARGV[1 + 2 * i] .. '"')
  end
  local capacity = tonumber(ARGV[2 + 2 * i])
  if not (finite(capacity) and capacity >= 1) then
    return bad('capacity', 'of ' .. KEYS[i] .. ' must be a finite number >= 1, got "' .. ARGV[2 + 2 * i] .. '"')
  end
  rates[i], capacities[i] = rate, capacity
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = now / 1000
local now_text = time[1] .. string.rep('0', 6 - #time[2]) .. time[2]

local result = { now_text }
for i = 1, k do
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts', 'blocked_until')
  local capacity = capacities[i]
  local level = tonumber(state[1])
  local ts = tonumber(state[2])
  if level == nil or ts == nil then
    level = capacity
  else
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    level = level + elapsed * rates[i] / 1000000
  end
  level = level + n
  if level > capacity then level = capacity end
  local ttl = math.max(min_ttl, math.ceil(2 * capacity / rates[i]))
  local block = tonumber(state[3])
  if block ~= nil and block > now_ms then
    ttl = math.max(ttl, math.ceil((block - now_ms) / 1000) + 1)
  end
  ttl = math.min(ttl, MAX_TTL_SECONDS)
  -- The same config string as acquire.lua writes (rate, capacity, minTtlSeconds).
  local config = ARGV[1 + 2 * i] .. ' ' .. ARGV[2 + 2 * i] .. ' ' .. ARGV[2]
  redis.call('HSET', KEYS[i], 'tokens', str(level), 'ts', now_text, 'config', config)
  redis.call('EXPIRE', KEYS[i], ttl)
  result[1 + i] = str(level)
end
return result
