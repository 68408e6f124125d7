--[[
  done-mark: record the outcome of many events at once, so that a redelivery (after a crash or a
  rebalance) does not push them again.

  KEYS[1..n]    done-mark keys, one per event: <prefix>:{done}:<event id>
  ARGV[1]       time to remember them, in whole seconds (> 0): the dedupe window
  ARGV[2..n+1]  the outcome of KEYS[i-1]: 'delivered', 'dead-lettered' or 'invalid-token'

  Returns       n, the number of marks written.
  Errors        'ERR done-mark: ttl must be a positive integer'
                'ERR done-mark: expected one outcome per key'
]]
local ttl = tonumber(ARGV[1])
if not ttl or ttl <= 0 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR done-mark: ttl must be a positive integer')
end
if #ARGV ~= #KEYS + 1 then
  return redis.error_reply('ERR done-mark: expected one outcome per key')
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ttl)
end
return #KEYS
