--[[
  provider-bucket.lua: what the bucket standing for a provider's own limit (KEYS[1] of acquire.lua,
  refund.lua and block.lua) keeps beside its level, shared by those scripts and inspect.lua.

  Hash fields (besides tokens, ts, config, blocked_until):
    held:<holder>   '<tokens> <expiresAtMs>': tokens granted to one holder (a consumer's token pool)
                    that the provider has not answered yet, as the holder last reported them, until the
                    lease runs out (a holder that crashed stops counting then).
    cut             '<factor> <sinceMs> <holdMs> <recoveryPerSecond>': the provider throttled the project
                    at sinceMs, so the bucket refills at factor × rate; after holdMs the factor climbs
                    back by recoveryPerSecond per second until it is 1 again (then the field goes).
    promised:<holder>  '<µs>', or '<µs> low' for a low-priority caller (server clock): the holder was
                    granted less than it asked for and told to come back then (acquire.lua). The refill
                    until the latest such time is promised to those holders, so another short holder is
                    told to come back later, for what accrues after that: throttled consumers take turns,
                    each finding a whole refill, instead of waking together to split one. A normal caller
                    waits only for the promises of normal callers (low-priority ones cannot take what it
                    may take, the reserve below); a low one waits for all of them. A promise goes once
                    its holder is served, reports that it holds nothing (refund.lua), or its time has
                    passed.
    normal_rate     '<rate> <tsµs> <lowSeenµs>': the tokens per second granted to normal-priority calls,
                    an exponentially decaying average (time constant 1 s) as of tsµs, and when a
                    low-priority call last came. Only a low-priority call creates it, and a normal call
                    drops it once no low-priority call has come for 10 s, so a bucket without low traffic
                    costs its normal calls nothing. A low-priority call may take only what is above a
                    reserve of min(capacity / 2, a quarter second of that rate), 0 without the field.

  Why `held` caps the refill: a token counts against the provider when its request arrives there, and
  the provider's bucket, full, throws away refill that Aqueduct's would still earn for tokens granted but
  not yet arrived. Refilling only up to capacity − held (the sum over live holders) makes Aqueduct's
  bucket lose refill whenever the provider's could, so that the provider always has at least Aqueduct's
  level plus what is on its way to it, and every request it gets is within its limit: no margin under
  the provider's published rate and burst is needed, whatever the number of consumers.

  Why the reserve: a tenant over its fair share has its excess parked and read back by low-priority
  pools, which would otherwise drain every refill, so that a small tenant's normal-priority trickle
  would wait for turns behind that backlog. Holding a quarter second of what the normal class is being
  granted out of the low class's reach lets a normal call find its tokens at once; sized from the
  normal grants, the reserve is 0 when there are none, and the backlog then uses the whole budget.
]]

-- The bucket at `key` in one read: its four level fields as acquire.lua reads them ({ tokens, ts,
-- blocked_until, config }, texts or nil), the tokens held by live holders, the names of the holder and
-- promise fields that have lapsed (or nil), the cut field (or nil), the latest promise of a holder other
-- than `holder` that is still ahead (µs, or nil; of a normal holder only unless `low`), whether `holder`
-- has a promise of its own, and the normal_rate field (or nil).
local function read_provider_bucket(key, now_ms, holder, low)
  local all = redis.call('HGETALL', key)
  local state = { nil, nil, nil, nil }
  local held, stale, cut, promised, own_promise, normal_rate = 0, nil, nil, nil, false, nil
  local now_us = now_ms * 1000
  local own = holder and holder ~= '' and 'promised:' .. holder
  for j = 1, #all, 2 do
    local name, value = all[j], all[j + 1]
    if name == 'tokens' then state[1] = value
    elseif name == 'ts' then state[2] = value
    elseif name == 'blocked_until' then state[3] = value
    elseif name == 'config' then state[4] = value
    elseif name == 'cut' then cut = value
    elseif name == 'normal_rate' then normal_rate = value
    elseif string.sub(name, 1, 9) == 'promised:' then
      local at, by_low = tonumber(value), false
      if not at then
        at, by_low = tonumber(string.match(value, '^(%d+) low$')), true
      end
      if not at or at <= now_us then
        stale = stale or {}
        stale[#stale + 1] = name
      elseif name == own then
        own_promise = true
      elseif (low or not by_low) and (not promised or at > promised) then
        promised = at
      end
    elseif string.sub(name, 1, 5) == 'held:' then
      local tokens, expires = string.match(value, '^(%S+) (%S+)$')
      tokens, expires = tonumber(tokens), tonumber(expires)
      if tokens and expires and expires > now_ms then
        held = held + tokens
      else
        stale = stale or {}
        stale[#stale + 1] = name
      end
    end
  end
  return state, held, stale, cut, promised, own_promise, normal_rate
end

-- The share of its rate a bucket with this cut field refills at, at `at_ms`: 1 without a cut.
local function rate_factor(cut, at_ms)
  if not cut then return 1 end
  local factor, since, hold, recovery = string.match(cut, '^(%S+) (%S+) (%S+) (%S+)$')
  factor, since, hold, recovery = tonumber(factor), tonumber(since), tonumber(hold), tonumber(recovery)
  if not (factor and since and hold and recovery) then return 1 end
  local climbing = at_ms - since - hold
  if climbing > 0 then factor = factor + recovery * climbing / 1000 end
  if factor >= 1 then return 1 end
  return factor
end
