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
  TTL:              as acquire.lua (bucket_ttl in includes/ttl.lua), always renewed (which keeps
                    acquire.lua's renewal rule sound: ts is a renewal too)

  Returns one string of decimal numbers separated by single spaces (see replyFields in
  src/redis/scripts.ts): 'nowMicros tokensLeft[1] ... tokensLeft[k]'

  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 2 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
]]

--- @include "arguments"
--- @include "server-time"
--- @include "refill"
--- @include "ttl"
--- @include "number-text"

local k = #KEYS
local failure = bucket_count_error(2, 2, 'n, minTtlSeconds, then rate and capacity per key')
  or integer_error(1, 'n', 0)
  or integer_error(2, 'minTtlSeconds', 1)
for i = 1, k do
  failure = failure or bucket_limits_error(i, 1 + 2 * i)
end
if failure then return failure end
local n, min_ttl = tonumber(ARGV[1]), tonumber(ARGV[2])

local now, now_text = server_time()
local now_ms = now / 1000

local reply = { now_text }
for i = 1, k do
  local key, rate_text, capacity_text = KEYS[i], ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local rate, capacity = tonumber(rate_text), tonumber(capacity_text)
  local state = redis.call('HMGET', key, 'tokens', 'ts', 'blocked_until')
  local level = refilled(tonumber(state[1]), tonumber(state[2]), now, rate, capacity) + n
  if level > capacity then level = capacity end
  local level_text = number_text(level)
  -- The same config string as acquire.lua writes (rate, capacity, minTtlSeconds).
  local config = rate_text .. ' ' .. capacity_text .. ' ' .. ARGV[2]
  redis.call('HSET', key, 'tokens', level_text, 'ts', now_text, 'config', config)
  redis.call('EXPIRE', key, bucket_ttl(rate, capacity, min_ttl, tonumber(state[3]), now_ms))
  reply[1 + i] = level_text
end
return table.concat(reply, ' ')
