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

  Hash fields:      tokens (may be fractional), ts (µs of the last update), config ('<rate> <capacity>
                    <minTtlSeconds>' as last given, for `aqueduct inspect`), blocked_until (epoch ms,
                    written by block.lua; read here)
  TTL:              every key written has one: ttl = max(minTtlSeconds, ceil(2 * capacity / rate), until
                    its block ends + 1 s), renewed by the first call of every ttl / 2 epoch of the server
                    clock (and while blocked, and when config changes), so an idle bucket disappears only
                    once it would be full again anyway.

  Returns one string of decimal numbers separated by single spaces (Lua numbers returned to Redis would
  be truncated to integers; one bulk string is cheaper for the client to decode than k + 4):
    'granted waitMs blockedUntilMs nowMicros tokensLeft[1] ... tokensLeft[k]'
    blockedUntilMs: empty (two spaces in a row) when no block is active
    waitMs: ms until waitFor more tokens are available in every bucket and no block is active
            (rounded up; 0 when waitFor is 0)
    tokensLeft: with up to 17 significant digits, so the double round-trips exactly

  Error replies (nothing is written):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 3 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT waitFor <message>        waitFor is not '' nor an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
]]

-- This script runs once per message batch of every consumer: it is written to allocate little (Lua
-- tables and strings) and to call Redis three times (TIME, HMGET, HSET) on the common path.
local floor, huge, tonumber, format = math.floor, math.huge, tonumber, string.format

-- Floating-point sums of fractional refills can land a hair below a whole token; this much is forgiven.
local EPSILON = 1e-9
-- EXPIRE takes at most this many seconds without overflowing; %d is exact below 2^53.
local MAX_TTL_SECONDS = 2147483647
local MAX_EXACT_INTEGER = 9007199254740992
local ARGUMENT = 'AQUEDUCT_ARGUMENT '

local k = #KEYS
if k == 0 then
  return redis.error_reply(ARGUMENT .. 'buckets must name at least one bucket key')
end
if #ARGV ~= 3 + 2 * k then
  return redis.error_reply(format(
    '%sbuckets (%d keys) need %d ARGV (n, waitFor, minTtlSeconds, then rate and capacity per key), got %d',
    ARGUMENT, k, 3 + 2 * k, #ARGV))
end

-- Each check passes only finite valid numbers (NaN fails every comparison).
local n = tonumber(ARGV[1])
if not (n and n >= 0 and n < huge and n == floor(n)) then
  return redis.error_reply(ARGUMENT .. 'n must be an integer >= 0, got "' .. ARGV[1] .. '"')
end
local wait_for = nil
if ARGV[2] ~= '' then
  wait_for = tonumber(ARGV[2])
  if not (wait_for and wait_for >= 0 and wait_for < huge and wait_for == floor(wait_for)) then
    return redis.error_reply(ARGUMENT .. 'waitFor must be an integer >= 0, got "' .. ARGV[2] .. '"')
  end
end
local min_ttl = tonumber(ARGV[3])
if not (min_ttl and min_ttl >= 1 and min_ttl < huge and min_ttl == floor(min_ttl)) then
  return redis.error_reply(ARGUMENT .. 'minTtlSeconds must be an integer >= 1, got "' .. ARGV[3] .. '"')
end
for i = 1, k do
  local rate, capacity = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  if not (rate and rate > 0 and rate < huge) then
    return redis.error_reply(
      ARGUMENT .. 'rate of ' .. KEYS[i] .. ' must be a finite number > 0, got "' .. ARGV[2 + 2 * i] .. '"')
  end
  if not (capacity and capacity >= 1 and capacity < huge) then
    return redis.error_reply(
      ARGUMENT .. 'capacity of ' .. KEYS[i] .. ' must be a finite number >= 1, got "' .. ARGV[3 + 2 * i] .. '"')
  end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = now / 1000
local now_text = time[1] .. string.rep('0', 6 - #time[2]) .. time[2] -- µs, exact, without formatting

-- Read every bucket, refill it to now and find what all of them can give.
local states, levels = {}, {}
local available, smallest_capacity, blocked_until = huge, huge, nil
for i = 1, k do
  local rate, capacity = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts', 'blocked_until', 'config')
  local level, ts = tonumber(state[1]), tonumber(state[2])
  if level == nil or ts == nil then
    level = capacity -- a new (or expired) bucket starts full
  elseif now > ts then -- (a server clock that stepped back, e.g. after a failover, refills nothing)
    level = level + (now - ts) * rate / 1000000
  end
  if level > capacity then level = capacity end
  states[i], levels[i] = state, level
  local whole = floor(level + EPSILON)
  if whole < available then available = whole end
  if capacity < smallest_capacity then smallest_capacity = capacity end
  local block = tonumber(state[3])
  if block and block > now_ms and (not blocked_until or block > blocked_until) then blocked_until = block end
end

local granted = 0
if not blocked_until then
  granted = n < available and n or available
end

-- How long until `want` more tokens are in every bucket (refill continues during a block).
local want = wait_for or n - granted
local most_waitable = floor(smallest_capacity + EPSILON)
if want > most_waitable then want = most_waitable end
local wait_us = 0
for i = 1, k do
  local left = levels[i] - granted
  if left < 0 then left = 0 end
  levels[i] = left
  local deficit = want - left
  if deficit > 0 then
    local us = deficit / tonumber(ARGV[2 + 2 * i]) * 1000000
    if us > wait_us then wait_us = us end
  end
end
if want > 0 and blocked_until then
  local us = blocked_until * 1000 - now
  if us > wait_us then wait_us = us end
end
local wait_ms = math.ceil(wait_us / 1000)

local texts = {}
for i = 1, k do
  local key, state, level = KEYS[i], states[i], levels[i]
  local rate_text, capacity_text = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  -- 17 significant digits round-trip every double exactly (tostring keeps only 14); whole numbers take
  -- the cheaper %d.
  local level_text
  if level == floor(level) and level < MAX_EXACT_INTEGER then
    level_text = format('%d', level)
  else
    level_text = format('%.17g', level)
  end
  local block = tonumber(state[3])
  local blocked = block and block > now_ms
  local ttl = math.ceil(2 * tonumber(capacity_text) / tonumber(rate_text))
  if ttl < min_ttl then ttl = min_ttl end
  if blocked then
    local until_block = math.ceil((block - now_ms) / 1000) + 1
    if until_block > ttl then ttl = until_block end
  end
  if ttl > MAX_TTL_SECONDS then ttl = MAX_TTL_SECONDS end
  local config = rate_text .. ' ' .. capacity_text .. ' ' .. ARGV[3]
  -- The TTL is renewed by the first call in each half-TTL epoch of the server clock (and by every call
  -- while blocked, or when the configuration changed), not by every call: the last renewal is then never
  -- more than ttl / 2 ago, so the key outlives ttl / 2 >= capacity / rate seconds of idleness, after
  -- which the bucket would be full anyway, and its expiry loses nothing.
  local previous = tonumber(state[2])
  local epoch_us = ttl * 500000
  if blocked or state[4] ~= config or not previous or floor(previous / epoch_us) ~= floor(now / epoch_us) then
    -- config (rate, capacity, minTtlSeconds) is stored for `aqueduct inspect` and to notice changes.
    redis.call('HSET', key, 'tokens', level_text, 'ts', now_text, 'config', config)
    redis.call('EXPIRE', key, ttl)
  else
    redis.call('HSET', key, 'tokens', level_text, 'ts', now_text) -- the common case
  end
  if block and not blocked then
    redis.call('HDEL', key, 'blocked_until') -- a block that is over: tidy it away
  end
  texts[i] = level_text
end

return format('%d %d %s %s %s', granted, wait_ms, blocked_until and format('%d', blocked_until) or '', now_text,
  k == 1 and texts[1] or table.concat(texts, ' '))
