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
                    KEYS[1] is the provider's bucket: its rate is cut as well
  ARGV[1]           retryAfterMs: a finite number >= 0, milliseconds from the server's now
  ARGV[2]           minTtlSeconds: an integer >= 1
  ARGV[3]           maxBlockMs: a finite number >= 0, the longest block from the server's now
  ARGV[4]           rateCut: a number in (0, 1]: KEYS[1] refills at this share of the rate it refills at
                    now (1: no cut). At most one cut a second: the 429s of one overrun come together
  ARGV[5]           holdMs: an integer >= 0, how long the cut rate holds before it climbs back
  ARGV[6]           recoveryPerSecond: a number > 0, the share of the rate regained per second after that

  Hash fields:      writes blocked_until (epoch ms, an integer: the deadline rounded up) and, on KEYS[1],
                    cut (includes/provider-bucket.lua)
  TTL:              never shortened; raised to at least ceil(retryAfterMs / 1000) + minTtlSeconds so the
                    block (and the bucket level under it) outlives the block's end

  Returns one string of decimal numbers separated by single spaces (see replyFields in
  src/redis/scripts.ts): 'nowMicros blockedUntilMs[1] ... blockedUntilMs[k]' (the deadline now in force
  for each key, which may be a later one set before)

  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 6
    AQUEDUCT_ARGUMENT retryAfterMs <message>   retryAfterMs is NaN, infinite or < 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT maxBlockMs <message>     maxBlockMs is NaN, infinite or < 0
    AQUEDUCT_ARGUMENT rateCut <message>        rateCut is not a number in (0, 1]
    AQUEDUCT_ARGUMENT holdMs <message>         holdMs is not an integer >= 0
    AQUEDUCT_ARGUMENT recoveryPerSecond <message>  recoveryPerSecond is not a finite number > 0
]]

--- @include "arguments"
--- @include "server-time"
--- @include "ttl"
--- @include "number-text"
--- @include "provider-bucket"

-- The lowest share of its rate a cut leaves a bucket.
local MIN_RATE_FACTOR = 0.05
-- Cuts come at most this often (ms): the 429s answered to one overrun's requests count once.
local CUT_SPACING_MS = 1000

local k = #KEYS
local failure = bucket_count_error(6, 0, 'retryAfterMs, minTtlSeconds, maxBlockMs, rateCut, holdMs, recoveryPerSecond')
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
local rate_cut = tonumber(ARGV[4])
if not (rate_cut and rate_cut > 0 and rate_cut <= 1) then
  return argument_error('rateCut', 'must be a number in (0, 1], got "' .. ARGV[4] .. '"')
end
failure = integer_error(5, 'holdMs', 0)
if failure then return failure end
local recovery = tonumber(ARGV[6])
if not (recovery and recovery > 0 and recovery < math.huge) then
  return argument_error('recoveryPerSecond', 'must be a finite number > 0, got "' .. ARGV[6] .. '"')
end

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

if rate_cut < 1 then
  local key = KEYS[1]
  local now_ms = now / 1000
  local cut = redis.call('HGET', key, 'cut')
  local since = cut and tonumber(string.match(cut, '^%S+ (%S+)'))
  if not since or now_ms - since >= CUT_SPACING_MS then
    local factor = rate_factor(cut, now_ms) * rate_cut
    if factor < MIN_RATE_FACTOR then factor = MIN_RATE_FACTOR end
    redis.call('HSET', key, 'cut', number_text(factor) .. ' ' .. number_text(now_ms - now_ms % 1) .. ' '
      .. ARGV[5] .. ' ' .. number_text(recovery))
  end
end
return table.concat(reply, ' ')
