--[[
  dedupe-mark: records what was finished, for a redelivery (after a crash or a rebalance) and for a
  second copy of an event published twice.

  KEYS[1..p]     finished-offset sets of partitions (<prefix>:{p:<topic>:<partition>}:finished:<group>)
  KEYS[p+1..]    the idempotency window's shard keys, two per shard (see includes/window.lua)
  ARGV[1]        p, the number of finished-offset sets
  ARGV[2]        windowSeconds, an integer >= 1 (ignored when no shard key is given)
  ARGV[3]        finishedTtlSeconds, an integer >= 1: a finished-offset set left behind (its topic
                 deleted, its group gone) expires after this long without a mark
  ARGV[4..3+2p]  per finished-offset set: the committed offset, below which its offsets are removed
                 ('' for no trim), then the finished offsets to add, joined by ',' ('' for none)
  ARGV[4+2p..]   per shard, in KEYS order: 9-byte entries (fingerprint and outcome byte), concatenated

  Returns        the number of offsets and entries written.
  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>               keys and ARGV do not pair up
    AQUEDUCT_ARGUMENT windowSeconds <message>        not an integer >= 1
    AQUEDUCT_ARGUMENT finishedTtlSeconds <message>   not an integer >= 1

  Trimming below the committed offset is what bounds the finished sets: once Kafka's commit passes an
  offset, nothing about it stays here. A set holds only what finished out of order above the commit.
]]

--- @include "arguments"
--- @include "window"

local p = tonumber(ARGV[1])
local shards = p and (#KEYS - p) / 2
if p == nil or p < 0 or shards % 1 ~= 0 or #ARGV ~= 3 + 2 * p + shards then
  return argument_error('shards', 'need ARGV p, windowSeconds, finishedTtlSeconds, two per set, one per shard key pair; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
local failure = integer_error(3, 'finishedTtlSeconds', 1)
if failure then return failure end
if shards > 0 then
  failure = integer_error(2, 'windowSeconds', 1)
  if failure then return failure end
end

local written = 0
for i = 1, p do
  local committed, offsets = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if committed ~= '' then redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. committed) end
  if offsets ~= '' then
    local args = {}
    for offset in string.gmatch(offsets, '[^,]+') do
      args[#args + 1] = offset
      args[#args + 1] = offset
      if #args >= 2000 then
        redis.call('ZADD', KEYS[i], unpack(args))
        args = {}
      end
      written = written + 1
    end
    if #args > 0 then redis.call('ZADD', KEYS[i], unpack(args)) end
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  end
end
if shards > 0 then
  local window = tonumber(ARGV[2])
  local g = current_generation(window)
  local header = generation_header(g)
  for s = 1, shards do
    local key = KEYS[p + 2 * s - 1 + g % 2]
    local entries = ARGV[3 + 2 * p + s]
    if redis.call('GETRANGE', key, 0, HEADER - 1) == header then
      redis.call('APPEND', key, entries)
    else
      redis.call('SET', key, header .. entries, 'EXAT', (g + 2) * window)
    end
    written = written + #entries / ENTRY
  end
end
return written
