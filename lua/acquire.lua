--[[
  acquire.lua: take up to n tokens from every bucket at once (Aqueduct's distributed token bucket).

  Each bucket is a hash that refills continuously at `rate` tokens/s up to `capacity`, measured with the
  Redis server's clock (TIME, microseconds); a caller's clock is never used. The script grants
  g = min(n, floor(tokens) of every bucket) and deducts g from every bucket, atomically. While any bucket
  has a block-until in the future (a provider's 429 Retry-After, see block.lua) nothing is granted.

  KEYS[1..k]        the bucket hashes; all in one Redis Cluster slot (one hash tag), e.g.
                    aqueduct:{fcm}:bucket and aqueduct:{fcm}:bucket:tenant:acme. KEYS[1] stands for the
                    provider's own limit: its refill is capped by the tokens its holders hold and slowed
                    by a rate cut (see includes/provider-bucket.lua)
  ARGV[1]           n: tokens wanted, an integer >= 0
  ARGV[2]           waitFor: an integer >= 0, how many tokens the returned wait is for;
                    '' means n - granted. Clamped to floor(smallest capacity), and for a holder
                    granted less than n to n - granted (its turn is for what it still lacks).
  ARGV[3]           minTtlSeconds: an integer >= 1, the shortest TTL given to a bucket
  ARGV[2 + 2i]      rate of KEYS[i] in tokens/s, a finite number > 0 (may be fractional)
  ARGV[3 + 2i]      capacity of KEYS[i], a finite number >= 1
  ARGV[4 + 2k]      holder: who asks ('' for nobody in particular), e.g. one consumer's token pool
  ARGV[5 + 2k]      held: an integer >= 0, the tokens the holder holds besides this call's grant (granted
                    before and not yet answered by the provider); the holder's entry becomes held + granted
  ARGV[6 + 2k]      leaseMs: an integer >= 1, how long the entry counts without a newer report
  ARGV[7 + 2k]      priority: '' or 'normal', or 'low': a low-priority call may take only the tokens of
                    KEYS[1] above a reserve kept for normal calls, min(capacity / 2, a quarter second of
                    what normal calls are being granted), and its wait is for want tokens above it
                    (normal_rate, includes/provider-bucket.lua)

  Hash fields:      tokens (may be fractional), ts (µs of the last update), config ('<rate> <capacity>
                    <minTtlSeconds>' as last given, for `aqueduct inspect` and to notice a change),
                    blocked_until (epoch ms, written by block.lua; read here); on KEYS[1] also held:<holder>,
                    promised:<holder>, normal_rate and cut (includes/provider-bucket.lua). All of them are only ever
                    written by these scripts (numbers as decimal text, config only with checked texts)
                    and are read as such: a field edited by hand into something else may fail the call.
  TTL:              every key written has one (bucket_ttl in includes/ttl.lua): ttl = max(minTtlSeconds,
                    ceil(2 * capacity / rate), until its block ends + 1 s), renewed by the first call of every minTtlSeconds / 2 epoch of
                    the server clock (and while blocked, and when config changes), so an idle bucket
                    disappears only once it would be full again anyway.

  Returns one string of decimal numbers separated by single spaces (the reply shape of every script
  with several values; see replyFields in src/redis/scripts.ts):
    'granted waitMs blockedUntilMs nowMicros tokensLeft[1] ... tokensLeft[k]'
    blockedUntilMs: empty (two spaces in a row) when no block is active
    waitMs: ms until waitFor more tokens are available in every bucket and no block is active
            (rounded up; 0 when waitFor is 0); for a caller granted less than n, the refill of KEYS[1]
            promised to other holders comes first (promised:<holder>, includes/provider-bucket.lua; for a
            normal call only what normal holders were promised), and the time this holder is told
            becomes its promise
    tokensLeft: with up to 17 significant digits, so the double round-trips exactly

  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT buckets <message>        no keys, or #ARGV ~= 7 + 2 * #KEYS
    AQUEDUCT_ARGUMENT n <message>              n is not an integer >= 0
    AQUEDUCT_ARGUMENT waitFor <message>        waitFor is not '' nor an integer >= 0
    AQUEDUCT_ARGUMENT minTtlSeconds <message>  minTtlSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT rate <message>           a rate is NaN, infinite or <= 0
    AQUEDUCT_ARGUMENT capacity <message>       a capacity is NaN, infinite or < 1
    AQUEDUCT_ARGUMENT held <message>           held is not an integer >= 0
    AQUEDUCT_ARGUMENT leaseMs <message>        leaseMs is not an integer >= 1
    AQUEDUCT_ARGUMENT priority <message>       priority is not '', 'normal' nor 'low'
]]

-- This script runs once per message batch of every consumer, so its common path is kept to the three
-- Redis calls it needs (TIME, HMGET, HSET) and little else. Measured with callgrind on redis-server
-- 7.0.15, what costs most after those calls is turning text into numbers (tonumber runs strtod twice,
-- arithmetic on a numeric string once), numbers into text (string.format runs sprintf for every
-- conversion, even a %s) and the bytecodes themselves. So every argument and field is parsed once: n,
-- waitFor and minTtlSeconds with tonumber (which lets a bad one be reported), TIME's fields and our own
-- stored ones by arithmetic, and a rate and capacity by arithmetic too when they are the very texts the
-- bucket's stored config holds (they were checked before that config was written; other texts are
-- checked here). `x % 1 == 0` stands in for math.floor (NaN and ±inf fail it too), the TTL is computed
-- only when it is renewed, the reply is concatenated rather than formatted, and a call with one bucket
-- allocates no table of its own. Every `local function` costs a closure on every call that reaches it
-- (about 500 instructions, 0.7% of a call), so the shared Lua this script uses is spliced in where only
-- the calls that need it reach it: the argument checks in `rejected`, the TTL where it is renewed.

-- The error reply for a call that a check below turned down: the shared checks, run in the order of
-- the header's list, name the argument at fault (the checks below are the same predicates, written out
-- on the hot path). Defined before the locals below so that it captures none of them: a closure with
-- upvalues costs every call more.
local function rejected()
  --- @include "arguments"
  local failure = bucket_count_error(7, 2,
    'n, waitFor, minTtlSeconds, rate and capacity per key, then holder, held, leaseMs, priority')
    or integer_error(1, 'n', 0)
    or ARGV[2] ~= '' and integer_error(2, 'waitFor', 0)
    or integer_error(3, 'minTtlSeconds', 1)
  for i = 1, #KEYS do
    failure = failure or bucket_limits_error(i, 2 + 2 * i)
  end
  failure = failure or integer_error(5 + 2 * #KEYS, 'held', 0) or integer_error(6 + 2 * #KEYS, 'leaseMs', 1)
  local priority = ARGV[7 + 2 * #KEYS]
  if not failure and priority ~= '' and priority ~= 'normal' and priority ~= 'low' then
    failure = argument_error('priority', "must be '', 'normal' or 'low', got \"" .. priority .. '"')
  end
  return failure
end

--- @include "refill"
--- @include "provider-bucket"

local huge, tonumber, format = math.huge, tonumber, string.format
local KEYS, ARGV, call = KEYS, ARGV, redis.call

-- Floating-point sums of fractional refills can land a hair below a whole token; this much is forgiven.
local EPSILON = 1e-9
-- %d is exact below 2^53.
local MAX_EXACT_INTEGER = 9007199254740992
-- The normal class's granted rate (normal_rate) averages over this time constant; the reserve kept from
-- low-priority calls is this much of that rate, at most half the capacity; and the field goes once no
-- low-priority call has come for this long (see includes/provider-bucket.lua).
local NORMAL_RATE_TAU_US = 1000000
local RESERVE_SECONDS = 0.25
local LOW_IDLE_US = 10000000

local k = #KEYS
if k == 0 or #ARGV ~= 7 + 2 * k then return rejected() end
local n = tonumber(ARGV[1])
if not (n and n >= 0 and n < huge and n % 1 == 0) then return rejected() end
local wait_for = nil
if ARGV[2] ~= '' then
  wait_for = tonumber(ARGV[2])
  if not (wait_for and wait_for >= 0 and wait_for < huge and wait_for % 1 == 0) then return rejected() end
end
local min_ttl = tonumber(ARGV[3])
if not (min_ttl and min_ttl >= 1 and min_ttl < huge and min_ttl % 1 == 0) then return rejected() end
local holder = ARGV[4 + 2 * k]
local held = tonumber(ARGV[5 + 2 * k])
if not (held and held >= 0 and held < huge and held % 1 == 0) then return rejected() end
local lease = tonumber(ARGV[6 + 2 * k])
if not (lease and lease >= 1 and lease < huge and lease % 1 == 0) then return rejected() end
local low = false
local priority = ARGV[7 + 2 * k]
if priority ~= '' then
  if priority == 'low' then low = true elseif priority ~= 'normal' then return rejected() end
end
-- Rates and capacities are checked as the buckets are read below: reading writes nothing, so an error
-- reply still leaves every bucket as it was.

local time = call('TIME')
local seconds, micros = time[1], time[2]
local now = seconds * 1000000 + micros
local now_ms = now / 1000
if #micros < 6 then micros = string.rep('0', 6 - #micros) .. micros end
local now_text = seconds .. micros -- µs, exact, without formatting

-- Read every bucket, refill it to now and find what all of them can give. Each HMGET reply keeps its
-- bucket's state for the second pass, parsed in place: [1] the level refilled to now, [2] ts (µs of the
-- last write, or nil), [3] blocked_until (or nil), [4] true when the stored config is the one given,
-- else the config to store. `states` holds them only when there is more than one bucket.
local states = k > 1 and {} or nil
local first = nil
local available, smallest_capacity, blocked_until = huge, huge, nil
-- KEYS[1]'s holders and rate cut: held by all holders, lapsed holder fields, the cut field.
local provider_held, stale, cut, promised, own_promise = 0, nil, nil, nil, false
-- KEYS[1]'s normal_rate field: its text, and parsed: the normal class's granted rate decayed to now and
-- when a low-priority call last came (µs), and the texts of its three values. Then the reserve a
-- low-priority call must leave, and KEYS[1]'s capacity.
local normal_rate, normal_now, low_seen
local kept_rate, kept_at, kept_seen
local reserve, provider_capacity = 0, nil
-- The share of KEYS[1]'s rate it refills at now (for the wait).
local factor_now = 1
for i = 1, k do
  local state
  if i == 1 then
    state, provider_held, stale, cut, promised, own_promise, normal_rate =
      read_provider_bucket(KEYS[1], now_ms, holder, low)
  else
    state = call('HMGET', KEYS[i], 'tokens', 'ts', 'blocked_until', 'config')
  end
  local rate_text, capacity_text = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local config = rate_text .. ' ' .. capacity_text .. ' ' .. ARGV[3]
  local rate, capacity
  if state[4] == config then
    -- The texts this bucket's config was stored with, after they passed the checks below.
    rate, capacity = rate_text + 0, capacity_text + 0
    state[4] = true
  else
    rate, capacity = tonumber(rate_text), tonumber(capacity_text)
    if not (rate and rate > 0 and rate < huge and capacity and capacity >= 1 and capacity < huge) then
      return rejected()
    end
    state[4] = config
  end
  -- A missing tokens or ts means a new (or expired) bucket, which starts full (and has no ts).
  local level, ts, block = state[1], state[2], state[3]
  if level and ts then level, ts = level + 0, ts + 0 else ts = nil end
  if i == 1 then
    -- Refilled at the rate of the start of the interval (the cut's factor only climbs between cuts,
    -- so that is the lower one) and only up to what the holders leave of the capacity.
    local room = capacity - provider_held
    if room < 0 then room = 0 end
    if cut then
      factor_now = rate_factor(cut, now_ms)
      level = refilled(level, ts, now, rate * rate_factor(cut, ts and ts / 1000 or now_ms), room)
    else
      level = refilled(level, ts, now, rate, room)
    end
  else
    level = refilled(level, ts, now, rate, capacity)
  end
  if block then
    block = block + 0 -- written by block.lua
    if block > now_ms and (not blocked_until or block > blocked_until) then blocked_until = block end
  end
  state[1], state[2], state[3] = level, ts, block
  if states then states[i] = state else first = state end
  local whole = level + EPSILON
  if i == 1 and (low or normal_rate) then
    -- Only where low-priority calls have come (the field) or for one of them.
    if normal_rate then
      local r, at, seen = string.match(normal_rate, '^(%S+) (%S+) (%S+)$')
      kept_rate, kept_at, kept_seen = r, at, seen
      r, at, seen = tonumber(r), tonumber(at), tonumber(seen)
      if r and at and seen then
        if now > at then r = r * math.exp((at - now) / NORMAL_RATE_TAU_US) end
        normal_now, low_seen = r, seen
      end
    end
    if low then
      provider_capacity = capacity
      if normal_now then
        reserve = normal_now * RESERVE_SECONDS
        if reserve > capacity / 2 then reserve = capacity / 2 end
        whole = whole - reserve
        if whole < 0 then whole = 0 end
      end
    end
  end
  whole = whole - whole % 1
  if whole < available then available = whole end
  if capacity < smallest_capacity then smallest_capacity = capacity end
end

local granted = 0
if not blocked_until then
  granted = n < available and n or available
end

-- KEYS[1]'s normal_rate: a low-priority call notes that it came (creating the field with rate 0), a
-- normal one adds its grant to the decayed rate, or drops the field once the low class has gone quiet
-- (or it does not parse). nil leaves it as it is.
local normal_rate_text, drop_normal_rate = nil, false
if low then
  if normal_now then
    normal_rate_text = kept_rate .. ' ' .. kept_at .. ' ' .. now_text
  else
    normal_rate_text = '0 ' .. now_text .. ' ' .. now_text
  end
elseif normal_rate then
  if not normal_now or now - low_seen > LOW_IDLE_US then
    drop_normal_rate = true
  elseif granted > 0 then
    normal_rate_text = format('%.6g', normal_now + granted) .. ' ' .. now_text .. ' ' .. kept_seen
  end
end

-- A holder that got less than it asked for will come back: KEYS[1]'s refill until the latest promise
-- of another holder is for the holders told to come back by then, so this one is told to come back
-- for what accrues after that, and that time is its promise.
local short = granted < n and holder ~= ''
-- How long until `want` more tokens are in every bucket (refill continues during a block). A short
-- holder waits, and takes its turn, for no more than it was short of: `n` is all it asked for, so a
-- turn sized by waitFor beyond that would keep the holders told to come back after it waiting for
-- tokens nobody comes for (at the end of a backlog, the provider's allowance unused meanwhile).
local want = wait_for or n - granted
if short and want > n - granted then want = n - granted end
local most_waitable = smallest_capacity + EPSILON
most_waitable = most_waitable - most_waitable % 1
if want > most_waitable then want = most_waitable end
local wait_ms = 0
local promise = nil
if want > 0 then
  local wait_us = 0
  for i = 1, k do
    local left = (states and states[i] or first)[1] - granted
    if left < 0 then left = 0 end
    local rate = i == 1 and ARGV[4] * factor_now or ARGV[2 + 2 * i]
    local us
    if i == 1 and low then
      -- For want tokens above the reserve (as far as the capacity goes), and after the others' turns.
      local target = want + reserve
      if target > provider_capacity then target = provider_capacity end
      local deficit = target - left
      us = deficit > 0 and deficit / rate * 1000000 or 0
      if short and promised and promised > now then
        local turn = promised - now + want / rate * 1000000
        if turn > us then us = turn end
      end
    elseif i == 1 and short and promised and promised > now then
      us = promised - now + want / rate * 1000000
    else
      local deficit = want - left
      us = deficit > 0 and deficit / rate * 1000000 or 0
    end
    if us > wait_us then wait_us = us end
  end
  if blocked_until then
    local us = blocked_until * 1000 - now
    if us > wait_us then wait_us = us end
  end
  wait_ms = math.ceil(wait_us / 1000)
  if short then
    promise = format('%d', now + wait_us)
    if low then promise = promise .. ' low' end
  end
end

-- Write every bucket back. The TTL is renewed by the first call in each epoch of minTtlSeconds / 2 of
-- the server clock (and by every call while blocked, or when the configuration changed), not by every
-- call: a write then always finds the last renewal less than minTtlSeconds / 2 <= ttl / 2 ago, so the
-- key outlives ttl / 2 >= capacity / rate seconds without calls, after which the bucket would be full
-- anyway, and its expiry loses nothing. (x - x % e is x rounded down to a multiple of e: the start of
-- x's epoch.)
local epoch_us = min_ttl * 500000
local epoch = now - now % epoch_us
local texts = k > 1 and {} or nil
local level_text
for i = 1, k do
  local key, state = KEYS[i], states and states[i] or first
  local level = state[1] - granted
  if level < 0 then level = 0 end
  -- 17 significant digits round-trip every double exactly (tostring keeps only 14); whole numbers take
  -- the cheaper %d.
  if level % 1 == 0 and level < MAX_EXACT_INTEGER then
    level_text = format('%d', level)
  else
    level_text = format('%.17g', level)
  end
  local previous, block = state[2], state[3]
  local blocked = block and block > now_ms
  local config = state[4]
  if i == 1 and (promise or holder ~= '' and held + granted > 0 or normal_rate_text) then
    local fields = { 'tokens', level_text, 'ts', now_text }
    if config ~= true then
      fields[5], fields[6] = 'config', config
    end
    if holder ~= '' and held + granted > 0 then
      fields[#fields + 1] = 'held:' .. holder
      fields[#fields + 1] = format('%d', held + granted) .. ' ' .. format('%d', now_ms + lease)
    end
    if promise then
      fields[#fields + 1] = 'promised:' .. holder
      fields[#fields + 1] = promise
    end
    if normal_rate_text then
      fields[#fields + 1] = 'normal_rate'
      fields[#fields + 1] = normal_rate_text
    end
    call('HSET', key, unpack(fields))
  elseif config == true then
    call('HSET', key, 'tokens', level_text, 'ts', now_text) -- the common case
  else -- config (rate, capacity, minTtlSeconds) is stored for `aqueduct inspect` and to notice changes
    call('HSET', key, 'tokens', level_text, 'ts', now_text, 'config', config)
  end
  if i == 1 then
    -- Lapsed holders, this holder once it holds nothing, and a cut that has run its course.
    if holder ~= '' and held + granted == 0 then
      stale = stale or {}
      stale[#stale + 1] = 'held:' .. holder
    end
    if own_promise and not promise then -- served: its turn is over
      stale = stale or {}
      stale[#stale + 1] = 'promised:' .. holder
    end
    if cut and factor_now >= 1 then
      stale = stale or {}
      stale[#stale + 1] = 'cut'
    end
    if drop_normal_rate then
      stale = stale or {}
      stale[#stale + 1] = 'normal_rate'
    end
    if stale then call('HDEL', key, unpack(stale)) end
  end
  if blocked or config ~= true or not previous or previous - previous % epoch_us ~= epoch then
    --- @include "ttl"
    call('EXPIRE', key, bucket_ttl(ARGV[2 + 2 * i], ARGV[3 + 2 * i], min_ttl, block, now_ms))
  end
  if block and not blocked then
    call('HDEL', key, 'blocked_until') -- a block that is over: tidy it away
  end
  if texts then texts[i] = level_text end
end

-- (Concatenated: one string.format would run sprintf for each %s as well.)
return (granted < MAX_EXACT_INTEGER and format('%d', granted) or format('%.17g', granted)) .. ' '
  .. (wait_ms == 0 and '0' or wait_ms < MAX_EXACT_INTEGER and format('%d', wait_ms) or format('%.17g', wait_ms))
  .. ' ' .. (blocked_until and format('%d', blocked_until) or '') .. ' ' .. now_text .. ' '
  .. (texts and table.concat(texts, ' ') or level_text)
