--[[
  arguments.lua: the argument checks the scripts share. Each returns the error reply for a bad argument,
  or nil; a script returns that reply before it writes anything.

  Every error reply of every script is 'AQUEDUCT_ARGUMENT <argument> <message>' (mapped to typed errors
  in src/redis/script-errors.ts). Numbers pass only when finite: NaN fails every comparison, and
  `x % 1 == 0`, which stands in for math.floor, fails for NaN and ±inf too.
]]

-- The error reply for a bad argument.
local function argument_error(argument, message)
  return redis.error_reply('AQUEDUCT_ARGUMENT ' .. argument .. ' ' .. message)
end

-- Unless ARGV[index] is an integer >= least: the error reply naming it `argument`.
local function integer_error(index, argument, least)
  local value = tonumber(ARGV[index])
  if value and value >= least and value < math.huge and value % 1 == 0 then return nil end
  return argument_error(argument, 'must be an integer >= ' .. least .. ', got "' .. tostring(ARGV[index]) .. '"')
end

-- Unless KEYS names at least one bucket and ARGV holds `leading` arguments and then `per_key` for each
-- key: the error reply (`expected` lists the arguments for its message).
local function bucket_count_error(leading, per_key, expected)
  local k = #KEYS
  if k == 0 then
    return argument_error('buckets', 'must name at least one bucket key')
  end
  if #ARGV ~= leading + per_key * k then
    return argument_error('buckets', '(' .. k .. ' keys) need ' .. leading + per_key * k .. ' ARGV ('
      .. expected .. '), got ' .. #ARGV)
  end
  return nil
end

-- Unless ARGV[rate_index] is a rate (tokens/s, finite, > 0) and the next ARGV a capacity (finite, >= 1)
-- for KEYS[i]: the error reply.
local function bucket_limits_error(i, rate_index)
  local rate_text, capacity_text = ARGV[rate_index], ARGV[rate_index + 1]
  local rate, capacity = tonumber(rate_text), tonumber(capacity_text)
  if not (rate and rate > 0 and rate < math.huge) then
    return argument_error('rate', 'of ' .. KEYS[i] .. ' must be a finite number > 0, got "' .. rate_text .. '"')
  end
  if not (capacity and capacity >= 1 and capacity < math.huge) then
    return argument_error('capacity', 'of ' .. KEYS[i] .. ' must be a finite number >= 1, got "' .. capacity_text .. '"')
  end
  return nil
end
