--[[
  dedupe-mark: records what was finished, for a redelivery (after a crash or a rebalance) and for a
  second copy of an event published twice.

  KEYS[1..p]     finished-offset sets of partitions (<prefix>:{d<partition mod 3>}:finished:<topic>:<partition>:<group>)
  KEYS[p+1..]    the idempotency window's shard keys (see includes/window.lua)
  ARGV[1]        p, the number of finished-offset sets
  ARGV[2]        windowSeconds, an integer >= 1
  ARGV[3]        finishedTtlSeconds, an integer >= 1: a finished-offset set left behind (its topic
                 deleted, its group gone) expires after this long without a mark
  ARGV[4..3+2p]  per finished-offset set: the committed offset, below which its offsets are removed
                 ('' for no trim), then the finished offsets to add, joined by ',' ('' for none)
  ARGV[4+2p]     the number of entries per shard key, comma-separated ('' with no shard key)
  ARGV[5+2p]     the 9-byte entries (fingerprint and outcome byte), concatenated shard by shard

  Returns        the number of offsets and entries written.
  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>               keys, counts and entries do not add up
    AQUEDUCT_ARGUMENT windowSeconds <message>        not an integer >= 1
    AQUEDUCT_ARGUMENT finishedTtlSeconds <message>   not an integer >= 1

  Trimming below the committed offset is what bounds the finished sets: once Kafka's commit passes an
  offset, nothing about it stays here. A set holds only what finished out of order above the commit.
  A set that keeps offsets after a trim also keeps the commit they lie above, as the member 'commit'
  (scored by it; it never moves down while the set exists): a later owner that starts reading below it knows they describe records it is not
  reading again (the group's offsets were reset, or the topic was recreated); see dedupe-check.lua.
]]

--- @include "arguments"
--- @include "window"

local p = tonumber(ARGV[1])
if p == nil or p < 0 or p > #KEYS or #ARGV ~= 5 + 2 * p then
  return argument_error('shards', 'need ARGV p, windowSeconds, finishedTtlSeconds, two per set, counts, entries; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
local shards = #KEYS - p
local counts, problem = {}, nil
if shards > 0 then
  counts, problem = shard_counts(ARGV[4 + 2 * p], shards, ARGV[5 + 2 * p], ENTRY)
  if not counts then return argument_error('shards', problem) end
  local failure = integer_error(2, 'windowSeconds', 1)
  if failure then return failure end
end
local failure = integer_error(3, 'finishedTtlSeconds', 1)
if failure then return failure end

-- The member of a finished-offset set that holds the commit its offsets lie above (see the header).
local COMMIT = 'commit'

local written = 0
for i = 1, p do
  local committed, offsets = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local floor, kept = nil, false
  if committed ~= '' then
    floor = tonumber(committed)
    -- The commit a set lies above only rises: a flush sent again after Redis refused it may land after
    -- a later one, and its older commit must neither lower the record nor let passed offsets back in.
    local recorded = redis.call('ZSCORE', KEYS[i], COMMIT)
    if recorded and tonumber(recorded) >= floor then
      committed, floor, kept = recorded, tonumber(recorded), true
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. committed)
  end
  if offsets ~= '' then
    -- A flush without a commit still adds nothing below the one the set records: it may be an older
    -- flush, sent again, landing after the commit that passed its offsets.
    local minimum = floor
    if minimum == nil then
      local recorded = redis.call('ZSCORE', KEYS[i], COMMIT)
      if recorded then minimum = tonumber(recorded) end
    end
    local args = {}
    for offset in string.gmatch(offsets, '[^,]+') do
      -- An offset the commit has passed (finished in the same flush as the commit) is not added: after a
      -- drain no later commit would trim it.
      if minimum == nil or tonumber(offset) >= minimum then
        args[#args + 1] = offset
        args[#args + 1] = offset
        if #args >= 2000 then
          redis.call('ZADD', KEYS[i], unpack(args))
          args = {}
        end
        written = written + 1
      end
    end
    if #args > 0 then redis.call('ZADD', KEYS[i], unpack(args)) end
    redis.call('EXPIRE', KEYS[i], ARGV[3])
  end
  if floor ~= nil then
    local held = redis.call('ZCARD', KEYS[i])
    if kept then held = held - 1 end -- the record itself, scored at the commit, outlived the trim
    if held > 0 then
      redis.call('ZADD', KEYS[i], committed, COMMIT)
    else
      redis.call('DEL', KEYS[i]) -- drained: no key is left behind
    end
  end
end
if shards > 0 then
  local window = tonumber(ARGV[2])
  local g = current_generation(window)
  local current = generation_header(g, HEADER + 1)
  local generation = string.sub(current, 1, 9)
  local previous = string.sub(generation_header(g - 1, 0), 1, 9)
  local blob, from = ARGV[5 + 2 * p], 1
  for s = 1, shards do
    local key = KEYS[p + s]
    local entries = string.sub(blob, from, from + counts[s] * ENTRY - 1)
    from = from + counts[s] * ENTRY
    local held = redis.call('GETRANGE', key, 0, 8)
    if held == generation then
      redis.call('APPEND', key, entries)
    elseif held == previous then
      -- One generation on: the header's current entries become the previous ones, once per window.
      local text = redis.call('GET', key)
      local kept = string.sub(text, tonumber(string.sub(text, 10, 18)))
      redis.call('SET', key, generation_header(g, HEADER + 1 + #kept) .. kept .. entries, 'EXAT', (g + 2) * window)
    else
      redis.call('SET', key, current .. entries, 'EXAT', (g + 2) * window)
    end
    written = written + counts[s]
  end
end
return written
