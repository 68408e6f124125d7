--[[
  dedupe-check: what an earlier reading already finished, asked once for many events.

  KEYS[1..p]    finished-offset sets of the partitions read for the first time in this assignment
                (<prefix>:{d<partition mod 3>}:finished:<topic>:<partition>:<group>, sorted sets of offsets)
  KEYS[p+1..]   the idempotency window's shard keys (<prefix>:{d<shard mod 3>}:window:<shard>, see includes/window.lua)
  ARGV[1]       p, the number of finished-offset sets
  ARGV[2]       windowSeconds, an integer >= 1
  ARGV[3]       the number of fingerprints per shard key, comma-separated ('' with no shard key)
  ARGV[4]       the 8-byte fingerprints to look up, concatenated, shard by shard in KEYS order

  Returns     one string of fields separated by single spaces (see replyFields in src/redis/scripts.ts):
              for each finished-offset set, its offsets joined by ','; then one field with a character
              per fingerprint: the outcome byte found ('d', 'x', 'i') or '-' when there is none.
  Error replies (the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>         the counts, shard keys and fingerprints do not add up
    AQUEDUCT_ARGUMENT windowSeconds <message>  windowSeconds is not an integer >= 1

  A partition's finished offsets are read once per assignment: while a consumer owns the partition, it
  is the only writer. The window is read for every event, once per fetched batch.
]]

--- @include "arguments"
--- @include "window"

local p = tonumber(ARGV[1])
if p == nil or p < 0 or p > #KEYS or #ARGV ~= 4 then
  return argument_error('shards', 'need ARGV p, windowSeconds, counts, fingerprints; got ' .. #ARGV .. ' ARGV')
end
local shards = #KEYS - p
local fields = {}
for i = 1, p do
  fields[i] = table.concat(redis.call('ZRANGE', KEYS[i], 0, -1), ',')
end
if shards > 0 then
  local counts, problem = shard_counts(ARGV[3], shards, ARGV[4], 8)
  if not counts then return argument_error('shards', problem) end
  local failure = integer_error(2, 'windowSeconds', 1)
  if failure then return failure end
  local g = current_generation(tonumber(ARGV[2]))
  -- One MGET for every shard: a call per key costs more than the scans.
  local texts = redis.call('MGET', unpack(KEYS, p + 1, #KEYS))
  local fps, found, n = ARGV[4], {}, 0
  for s = 1, shards do
    local text = texts[s]
    local from = live_start(text, g)
    for _ = 1, counts[s] do
      n = n + 1
      local at = from and entry_position(text, string.sub(fps, 8 * n - 7, 8 * n), from)
      found[n] = at and string.sub(text, at + 8, at + 8) or '-'
    end
  end
  fields[p + 1] = table.concat(found)
end
return table.concat(fields, ' ')
