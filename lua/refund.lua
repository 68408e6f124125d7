--[[
  refund.lua: give unused tokens back to every bucket, never above its capacity.

  A caller that was granted tokens and then could not use them (a send failed before reaching the
  provider, a batch turned out smaller) returns them here. Each bucket is first refilled to now
  (Redis TIME, as in acquire.lua) and then topped up by n, capped at its capacity, so a refund can never
  create a burst the bucket could not have held.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag). KEYS[1] is the
                    provider's, refilled as acquire.lua refills it (holders' cap, rate cut)
  ARGV[1]           n: tokens to give back, an integer >= 0
  ARGV[2]           minTtlSeconds: an integer >= 1, the shortest TTL given to a bucket
  ARGV[1 + 2i]      rate of KEYS[i] in tokens/s, a finite number > 0 (may be fractional)
  ARGV[2 + 2i]      capacity of KEYS[i], a finite number >= 1
  ARGV[3 + 2k]      holder: who gives back ('' for nobody in particular)
  ARGV[4 + 2k]      held: an integer >= 0, what the holder still holds after giving these back; its
                    entry becomes that (0 removes it, and its promise, if any)
  ARGV[5 + 2k]      leaseMs: an integer >= 1, how long the entry counts without a newer report

  Hash fields:      writes tokens, ts, config (as acquire.lua) and the holder's entry on KEYS[1]; reads
                    blocked_until (for the TTL only)
  TTL:              as acquire.lua (bucket_ttl in includes/ttl.lua), always renewed (which keeps
                    acquire.lua's renewal rule sound: ts is a renewal too)

  Returns one string of decimal numbers separated by single spaces (see replyFields in
  src/redis/scripts.ts): 'nowMicros tokensLeft[1] ... tokensLeft[k]'

  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 5 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
    AQUEDUCT_ARGUMENT held <message>           held is not an integer >= 0
    AQUEDUCT_ARGUMENT leaseMs <message>        leaseMs is not an integer >= 1
]]

--- @include "arguments"
--- @include "server-time"
--- @include "refill"
--- @include "ttl"
--- @include "number-text"
--- @include "provider-bucket"

local k = #KEYS
local failure = bucket_count_error(5, 2, 'n, minTtlSeconds, rate and capacity per key, then holder, held, leaseMs')
  or integer_error(1, 'n', 0)
  or integer_error(2, 'minTtlSeconds', 1)
for i = 1, k do
  failure = failure or bucket_limits_error(i, 1 + 2 * i)
end
failure = failure or integer_error(4 + 2 * k, 'held', 0) or integer_error(5 + 2 * k, 'leaseMs', 1)
if failure then return failure end
local n, min_ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local holder, held, lease = ARGV[3 + 2 * k], tonumber(ARGV[4 + 2 * k]), tonumber(ARGV[5 + 2 * k])

local now, now_text = server_time()
local now_ms = now / 1000

local reply = { now_text }
for i = 1, k do
  local key, rate_text, capacity_text = KEYS[i], ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local rate, capacity = tonumber(rate_text), tonumber(capacity_text)
  local level
  local state
  if i == 1 then
    local provider_held, stale, cut
    state, provider_held, stale, cut = read_provider_bucket(key, now_ms, holder)
    local ts = tonumber(state[2])
    local room = capacity - provider_held
    if room < 0 then room = 0 end
    level = refilled(tonumber(state[1]), ts, now, rate * rate_factor(cut, ts and ts / 1000 or now_ms), room)
    if holder ~= '' then
      if held > 0 then
        redis.call('HSET', key, 'held:' .. holder, number_text(held) .. ' ' .. number_text(now_ms - now_ms % 1 + lease))
      else -- it holds nothing and waits for nothing: no entry, no turn
        stale = stale or {}
        stale[#stale + 1] = 'held:' .. holder
        stale[#stale + 1] = 'promised:' .. holder
      end
    end
    if stale then redis.call('HDEL', key, unpack(stale)) end
  else
    state = redis.call('HMGET', key, 'tokens', 'ts', 'blocked_until')
    level = refilled(tonumber(state[1]), tonumber(state[2]), now, rate, capacity)
  end
  level = level + n
  if level > capacity then level = capacity end
  local level_text = number_text(level)
  -- The same config string as acquire.lua writes (rate, capacity, minTtlSeconds).
  local config = rate_text .. ' ' .. capacity_text .. ' ' .. ARGV[2]
  redis.call('HSET', key, 'tokens', level_text, 'ts', now_text, 'config', config)
  redis.call('EXPIRE', key, bucket_ttl(rate, capacity, min_ttl, tonumber(state[3]), now_ms))
  reply[1 + i] = level_text
end
return table.concat(reply, ' ')
