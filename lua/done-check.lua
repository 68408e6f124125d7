--[[
  done-check: which of these events already have a recorded outcome (dedupe before sending).

  KEYS[1..n]  done-mark keys, one per event: <prefix>:{done}:<event id>
              (all share the {done} hash tag, so one call stays in one Redis Cluster slot)
  ARGV        none

  Returns     an array of n bulk strings: the outcome recorded for KEYS[i] ('delivered',
              'dead-lettered', 'invalid-token'), or '' when the event has none yet.
  Errors      none of its own.

  One call per fetched batch replaces one GET per event: the consumer's Redis traffic must stay near
  one round trip per hundred pushes.
]]
local out = {}
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value then out[i] = value else out[i] = '' end
end
return out
