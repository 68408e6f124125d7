--[[
  block.lua: block buckets fleet-wide until the server's now + retryAfterMs (a provider's 429 Retry-After),
  never further than now + maxBlockMs.

  While a bucket's block is in the future, acquire.lua grants nothing from any call that includes it and
  tells the caller to wait until the block ends. The deadline is computed from the Redis server's clock
  (TIME), like every other time in the limiter, so the instances' clocks do not matter. A block never
  shortens an existing one: the later of the two deadlines wins, so concurrent 429s with different
  Retry-After values end at the latest. Tokens keep refilling during a block. Neither the new deadline
  nor a stored one is let beyond now + maxBlockMs: a provider's (or a proxy's) absurd Retry-After must
  not freeze the fleet for years, and a deadline stored that far by an older version is cut back.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag). A key that does not
                    exist yet is created holding only the block (acquire.lua then treats it as full).
  ARGV[1]           retryAfterMs: a finite number >= 0, milliseconds from the server's now
  ARGV[2]           minTtlSeconds: an integer >= 1
  ARGV[3]           maxBlockMs: a finite number >= 0, the longest block from the server's now

  Hash fields:      writes blocked_until (epoch ms, an integer: the deadline rounded up)
  TTL:              never shortened; raised to at least ceil(retryAfterMs / 1000) + minTtlSeconds so the
                    block (and the bucket level under it) outlives the block's end

  Returns one string of decimal numbers separated by single spaces (see replyFields in
  src/redis/scripts.ts): 'nowMicros blockedUntilMs[1] ... blockedUntilMs[k]' (the deadline now in force
  for each key, which may be a later one set before)

  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 3
    AQUEDUCT_ARGUMENT retryAfterMs <message>   retryAfterMs is NaN, infinite or < 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT maxBlockMs <message>     maxBlockMs is NaN, infinite or < 0
]]

--- @include "arguments"
--- @include "server-time"
--- @include "ttl"
--- @include "number-text"

local k = #KEYS
local failure = bucket_count_error(3, 0, 'retryAfterMs, minTtlSeconds, maxBlockMs')
if failure then return failure end
local retry_after = tonumber(ARGV[1])
if not (retry_after and retry_after >= 0 and retry_after < math.huge) then
  return argument_error('retryAfterMs', 'must be a finite number >= 0, got "' .. ARGV[1] .. '"')
end
failure = integer_error(2, 'minTtlSeconds', 1)
if failure then return failure end
local min_ttl = tonumber(ARGV[2])
local max_block = tonumber(ARGV[3])
if not (max_block and max_block >= 0 and max_block < math.huge) then
  return argument_error('maxBlockMs', 'must be a finite number >= 0, got "' .. ARGV[3] .. '"')
end
if retry_after > max_block then retry_after = max_block end

local now, now_text = server_time()
local until_ms = math.ceil(now / 1000 + retry_after)
local latest = math.ceil(now / 1000 + max_block)

local reply = { now_text }
for i = 1, k do
  local key = KEYS[i]
  local effective = until_ms
  local existing = tonumber(redis.call('HGET', key, 'blocked_until'))
  if existing ~= nil and existing > effective then effective = existing end
  if effective > latest then effective = latest end
  local effective_text = number_text(effective)
  redis.call('HSET', key, 'blocked_until', effective_text)
  local ttl = math.min(math.ceil((effective - now / 1000) / 1000) + min_ttl, MAX_TTL_SECONDS)
  if redis.call('TTL', key) < ttl then -- -1 (no TTL: the key was just created) and shorter TTLs are raised
    redis.call('EXPIRE', key, ttl)
  end
  reply[1 + i] = effective_text
end
return table.concat(reply, ' ')
