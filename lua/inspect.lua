--[[
  inspect.lua: read buckets as they are at the server's now, for `aqueduct inspect`. Writes nothing.

  The stored `tokens` is the level at the bucket's last update; this script refills it to the current
  Redis TIME with the bucket's stored rate and capacity, its holders' cap and its rate cut (the same
  arithmetic as acquire.lua applies to a provider's bucket), so what is shown is what an acquire would
  see now.

  KEYS[1..k]        bucket hashes; all in one Redis Cluster slot (one hash tag). Keys that are gone
                    (expired since they were found) or are not hashes are reported as missing.
  ARGV              none

  Returns one string of fields separated by single spaces (see replyFields in src/redis/scripts.ts):
    'nowMicros', then 8 fields per key:
    present ('1' or '0'), tokensNow, rate, capacity, blockedUntilMs ('' when none is active), pttlMs,
    held (tokens its live holders hold), rateFactor (the share of its rate it refills at now)
  (an empty field is two spaces in a row; for a missing key only present = '0' is meaningful, the other
  seven are empty; a key that holds only a block, written before its first acquire, has no tokensNow,
  rate or capacity)

  Error replies: none of its own.
]]

--- @include "server-time"
--- @include "refill"
--- @include "number-text"
--- @include "provider-bucket"

local now, now_text = server_time()
local now_ms = now / 1000

local reply = { now_text }
for i = 1, #KEYS do
  local key = KEYS[i]
  local state, held, cut = nil, 0, nil
  if redis.call('TYPE', key).ok == 'hash' then
    local _
    state, held, _, cut = read_provider_bucket(key, now_ms) -- { tokens, ts, blocked_until, config }
  end
  local rate, capacity = nil, nil
  if state and state[4] then -- config is '<rate> <capacity> <minTtlSeconds>'
    local rate_text, capacity_text = string.match(state[4], '^(%S+) (%S+)')
    rate, capacity = tonumber(rate_text), tonumber(capacity_text)
  end
  local block = state and tonumber(state[3])
  local fields
  if rate and capacity then
    local ts = tonumber(state[2])
    local room = capacity - held
    if room < 0 then room = 0 end
    local level = refilled(tonumber(state[1]), ts, now, rate * rate_factor(cut, ts and ts / 1000 or now_ms), room)
    fields = { '1', number_text(level), number_text(rate), number_text(capacity) }
  elseif block then
    -- A block written before the first acquire carries no rate or capacity yet: its level is unknown.
    fields = { '1', '', '', '' }
  else
    fields = { '0', '', '', '', '', '', '', '' }
  end
  if fields[1] == '1' then
    fields[5] = block and block > now_ms and number_text(block) or ''
    fields[6] = number_text(redis.call('PTTL', key))
    fields[7] = number_text(held)
    fields[8] = number_text(rate_factor(cut, now_ms))
  end
  reply[#reply + 1] = table.concat(fields, ' ')
end
return table.concat(reply, ' ')
