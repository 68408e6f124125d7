--[[
  done-check: which of these events already have a recorded outcome (dedupe before sending).

  KEYS[1..n]  done-mark keys, one per event: <prefix>:{done}:<event id>
              (all share the {done} hash tag, so one call stays in one Redis Cluster slot)
  ARGV        none

  Returns     one string of n fields separated by single spaces (see replyFields in
              src/redis/scripts.ts): the outcome recorded for KEYS[i] ('delivered', 'dead-lettered',
              'invalid-token'), or an empty field when the event has none yet.
  Errors      none of its own.

  One call per fetched batch replaces one GET per event: the consumer's Redis traffic must stay near
  one round trip per hundred pushes.
]]
local outcomes = {}
for i = 1, #KEYS do
  outcomes[i] = redis.call('GET', KEYS[i]) or ''
end
return table.concat(outcomes, ' ')
