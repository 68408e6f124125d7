--[[
  done-mark: record the outcome of many events at once, so that a redelivery (after a crash or a
  rebalance) does not push them again.

  KEYS[1..n]    done-mark keys, one per event: <prefix>:{done}:<event id>
  ARGV[1]       ttlSeconds: how long to remember them, an integer >= 1 (the dedupe window)
  ARGV[2..n+1]  the outcome of KEYS[i-1]: 'delivered', 'dead-lettered' or 'invalid-token'

  Returns       n, the number of marks written.
  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT outcomes <message>    #ARGV ~= #KEYS + 1 (one outcome per key)
    AQUEDUCT_ARGUMENT ttlSeconds <message>  ttlSeconds is not an integer >= 1
]]

--- @include "arguments"

if #ARGV ~= #KEYS + 1 then
  return argument_error('outcomes', 'need one per key (' .. #KEYS .. ' keys) after ttlSeconds, got ' .. #ARGV - 1)
end
local failure = integer_error(1, 'ttlSeconds', 1)
if failure then return failure end
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ttl)
end
return #KEYS
