--[[
  block.lua: block buckets fleet-wide until the server's now + retryAfterMs (a provider's 429 Retry-After).

  While a bucket's block is in the future, acquire.lua grants nothing from any call that includes it and
  tells the caller to wait until the block ends. The deadline is computed from the Redis server's clock
  (TIME), like every other time in the limiter, so the instances' clocks do not matter. A block never
  shortens an existing one: the later of the two deadlines wins, so concurrent 429s with different
  Retry-After values end at the latest. Tokens keep refilling during a block.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag). A key that does not
                    exist yet is created holding only the block (acquire.lua then treats it as full).
  ARGV[1]           retryAfterMs: a finite number >= 0, milliseconds from the server's now
  ARGV[2]           minTtlSeconds: an integer >= 1

  Hash fields:      writes blocked_until (epoch ms, an integer: the deadline rounded up)
  TTL:              never shortened; raised to at least ceil(retryAfterMs / 1000) + minTtlSeconds so the
                    block (and the bucket level under it) outlives the block's end

  Returns, all as strings: { nowMicros, blockedUntilMs[1], ..., blockedUntilMs[k] } (the deadline now in
  force for each key, which may be a later one set before)

  Error replies (nothing is written):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 2
    AQUEDUCT_ARGUMENT retryAfterMs <message>   retryAfterMs is NaN, infinite or < 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
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
if #ARGV ~= 2 then
  return bad('buckets', string.format('expects 2 ARGV (retryAfterMs, minTtlSeconds), got %d', #ARGV))
end
local retry_after = tonumber(ARGV[1])
if not (finite(retry_after) and retry_after >= 0) then
  return bad('retryAfterMs', 'must be a finite number >= 0, got "' .. ARGV[1] .. '"')
end
local min_ttl = tonumber(ARGV[2])
if not (finite(min_ttl) and min_ttl >= 1 and min_ttl == math.floor(min_ttl)) then
  return bad('minTtlSeconds', 'must be an integer >= 1, got "' .. ARGV[2] .. '"')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local until_ms = math.ceil(now / 1000 + retry_after)

local result = { str(now) }
for i = 1, k do
  local existing = tonumber(redis.call('HGET', KEYS[i], 'blocked_until'))
  local effective = until_ms
  if existing ~= nil and existing > effective then effective = existing end
  redis.call('HSET', KEYS[i], 'blocked_until', str(effective))
  local ttl = math.min(math.ceil((effective - now / 1000) / 1000) + min_ttl, MAX_TTL_SECONDS)
  local current = redis.call('TTL', KEYS[i])
  if current < ttl then -- -1 (no TTL: the key was just created) and shorter TTLs are raised
    redis.call('EXPIRE', KEYS[i], ttl)
  end
  result[1 + i] = str(effective)
end
return result
