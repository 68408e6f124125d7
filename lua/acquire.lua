--[[
  acquire.lua: take up to n tokens from every bucket at once (Aqueduct's distributed token bucket).

  Each bucket is a hash that refills continuously at `rate` tokens/s up to `capacity`, measured with the
  Redis server's clock (TIME, microseconds); a caller's clock is never used. The script grants
  g = min(n, floor(tokens) of every bucket) and deducts g from every bucket, atomically. While any bucket
  has a block-until in the future (a provider's 429 Retry-After, see block.lua) nothing is granted.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag), e.g.
                    aqueduct:{fcm}:bucket and aqueduct:{fcm}:bucket:tenant:acme
  ARGV[1]           n: tokens wanted, an integer >= 0
  ARGV[2]           waitFor: an integer >= 0, how many tokens the returned wait is for;
                    '' means n - granted. Clamped to floor(smallest capacity).
  ARGV[3]           minTtlSeconds: an integer >= 1, the shortest TTL given to a bucket
  ARGV[2 + 2i]      rate of KEYS[i] in tokens/s, a finite number > 0 (may be fractional)
  ARGV[3 + 2i]      capacity of KEYS[i], a finite number >= 1

  Hash fields:      tokens (may be fractional), ts (µs of the last update), rate, capacity (as last given,
                    for `aqueduct inspect`), blocked_until (epoch ms, written by block.lua; read here)
  TTL:              every key written gets max(minTtlSeconds, ceil(2 * capacity / rate), until its block
                    ends + 1 s): an idle bucket disappears only once it would be full again anyway.

  Returns, all as strings (Lua numbers returned to Redis would be truncated to integers):
    { granted, waitMs, blockedUntilMs or '', nowMicros, tokensLeft[1], ..., tokensLeft[k] }
    waitMs: ms until waitFor more tokens are available in every bucket and no block is active
            (rounded up; '0' when waitFor is 0)

  Error replies (nothing is written):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 3 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT waitFor <message>        waitFor is not '' nor an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
]]

-- Redis 3.2 to 4 need this to write after the non-deterministic TIME; from Redis 5 it is the default.
redis.replicate_commands()

-- Floating-point sums of fractional refills can land a hair below a whole token; this much is forgiven.
local EPSILON = 1e-9
-- EXPIRE takes at most this many seconds without overflowing.
local MAX_TTL_SECONDS = 2147483647

local function bad(argument, message)
  return redis.error_reply('AQUEDUCT_ARGUMENT ' .. argument .. ' ' .. message)
end

local function finite(x)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge
end

local function is_count(x)
  return finite(x) and x >= 0 and x == math.floor(x)
end

-- 17 significant digits round-trip every double exactly (tostring keeps only 14).
local function str(x)
  return string.format('%.17g', x)
end

local k = #KEYS
if k == 0 then
  return bad('buckets', 'must name at least one bucket key')
end
if #ARGV ~= 3 + 2 * k then
  return bad('buckets', string.format(
    '%d keys need %d ARGV (n, waitFor, minTtlSeconds, then rate and capacity per key), got %d',
    k, 3 + 2 * k, #ARGV))
end

local n = tonumber(ARGV[1])
if not is_count(n) then
  return bad('n', 'must be an integer >= 0, got "' .. ARGV[1] .. '"')
end
local wait_for = nil
if ARGV[2] ~= '' then
  wait_for = tonumber(ARGV[2])
  if not is_count(wait_for) then
    return bad('waitFor', 'must be an integer >= 0, got "' .. ARGV[2] .. '"')
  end
end
local min_ttl = tonumber(ARGV[3])
if not (finite(min_ttl) and min_ttl >= 1 and min_ttl == math.floor(min_ttl)) then
  return bad('minTtlSeconds', 'must be an integer >= 1, got "' .. ARGV[3] .. '"')
end

local rates, capacities = {}, {}
for i = 1, k do
  local rate = tonumber(ARGV[2 + 2 * i])
  if not (finite(rate) and rate > 0) then
    return bad('rate', 'of ' .. KEYS[i] .. ' must be a finite number > 0, got "' .. ARGV[2 + 2 * i] .. '"')
  end
  local capacity = tonumber(ARGV[3 + 2 * i])
  if not (finite(capacity) and capacity >= 1) then
    return bad('capacity', 'of ' .. KEYS[i] .. ' must be a finite number >= 1, got "' .. ARGV[3 + 2 * i] .. '"')
  end
  rates[i], capacities[i] = rate, capacity
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = now / 1000

-- Refill every bucket to now and find what all of them can give.
local tokens, blocks = {}, {}
local available = math.huge
local smallest_capacity = math.huge
local blocked_until = nil
for i = 1, k do
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts', 'blocked_until')
  local capacity = capacities[i]
  local level = tonumber(state[1])
  local ts = tonumber(state[2])
  if level == nil or ts == nil then
    level = capacity -- a new (or expired) bucket starts full
  else
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end -- the server clock stepped back (failover): no refill, no debt
    level = level + elapsed * rates[i] / 1000000
  end
  if level > capacity then level = capacity end
  tokens[i] = level
  local whole = math.floor(level + EPSILON)
  if whole < available then available = whole end
  if capacity < smallest_capacity then smallest_capacity = capacity end
  local block = tonumber(state[3])
  if block ~= nil then
    if block > now_ms then
      blocks[i] = block
      if blocked_until == nil or block > blocked_until then blocked_until = block end
    else
      redis.call('HDEL', KEYS[i], 'blocked_until') -- over: tidy it away
    end
  end
end

local granted = 0
if blocked_until == nil then
  granted = math.min(n, available)
end

for i = 1, k do
  local left = tokens[i] - granted
  if left < 0 then left = 0 end
  tokens[i] = left
end

-- How long until `want` more tokens are in every bucket (refill continues during a block).
local want = wait_for
if want == nil then want = n - granted end
local most_waitable = math.floor(smallest_capacity + EPSILON)
if want > most_waitable then want = most_waitable end
local wait_us = 0
if want > 0 then
  for i = 1, k do
    local deficit = want - tokens[i]
    if deficit > 0 then
      local us = deficit / rates[i] * 1000000
      if us > wait_us then wait_us = us end
    end
  end
  if blocked_until ~= nil then
    local us = blocked_until * 1000 - now
    if us > wait_us then wait_us = us end
  end
end
local wait_ms = math.ceil(wait_us / 1000)

local result = { str(granted), str(wait_ms), blocked_until and str(blocked_until) or '', str(now) }
for i = 1, k do
  redis.call('HSET', KEYS[i], 'tokens', str(tokens[i]), 'ts', str(now),
    'rate', ARGV[2 + 2 * i], 'capacity', ARGV[3 + 2 * i])
  local ttl = math.max(min_ttl, math.ceil(2 * capacities[i] / rates[i]))
  if blocks[i] ~= nil then
    ttl = math.max(ttl, math.ceil((blocks[i] - now_ms) / 1000) + 1)
  end
  redis.call('EXPIRE', KEYS[i], math.min(ttl, MAX_TTL_SECONDS))
  result[4 + i] = str(tokens[i])
end
return result
