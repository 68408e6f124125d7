--[[
  dedupe-check: what an earlier reading already finished, asked once for many events.

  KEYS[1..p]    finished-offset sets of the partitions read for the first time in this assignment
                (<prefix>:{d<partition mod 3>}:finished:<topic>:<partition>:<group>, sorted sets of offsets)
  KEYS[p+1..]   the idempotency window's shard keys (<prefix>:{d<shard mod 3>}:window:<shard>, see includes/window.lua)
  ARGV[1]       p, the number of finished-offset sets
  ARGV[2]       windowSeconds, an integer >= 1
  ARGV[3]       the number of fingerprints per shard key, comma-separated ('' with no shard key)
  ARGV[4]       the 8-byte fingerprints to look up, concatenated, shard by shard in KEYS order
  ARGV[5..4+p]  per finished-offset set, the first offset its reader reads in this assignment ('' when
                not known): a set whose commit (its member 'commit', see dedupe-mark.lua) lies above it
                describes records the reader is not reading again, and is deleted unread

  Returns     one string of fields separated by single spaces (see replyFields in src/redis/scripts.ts):
              for each finished-offset set, its offsets joined by ',' ('' for one deleted); then one field
              with a character per fingerprint: the outcome byte found ('d', 'x', 'i') or '-' when there is none.
  Error replies (the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>         the counts, shard keys and fingerprints do not add up
    AQUEDUCT_ARGUMENT windowSeconds <message>  windowSeconds is not an integer >= 1
    AQUEDUCT_ARGUMENT from <message>           a first offset is neither '' nor an integer >= 0

  A partition's finished offsets are read once per assignment: while a consumer owns the partition, it
  is the only writer. The window is read for every event, once per fetched batch. A reader normally
  starts at the group's committed offset, which is never below the commit a set records; one starting
  below it follows a reset of the group's offsets (kafka-consumer-groups.sh --reset-offsets or
  --delete-offsets) or a topic deleted and created again: the set describes records this reading is not
  reading again, or others that had the same offsets. The one write of this script deletes such a set.
]]

--- @include "arguments"
--- @include "window"

local p = tonumber(ARGV[1])
if p == nil or p < 0 or p > #KEYS or #ARGV ~= 4 + p then
  return argument_error('shards', 'need ARGV p, windowSeconds, counts, fingerprints, a first offset per set; got '
    .. #ARGV .. ' ARGV')
end
for i = 1, p do
  if ARGV[4 + i] ~= '' then
    local failure = integer_error(4 + i, 'from', 0)
    if failure then return failure end
  end
end
local shards = #KEYS - p
local counts
if shards > 0 then
  local problem
  counts, problem = shard_counts(ARGV[3], shards, ARGV[4], 8)
  if not counts then return argument_error('shards', problem) end
  local failure = integer_error(2, 'windowSeconds', 1)
  if failure then return failure end
end

-- The member of a finished-offset set that holds the commit its offsets lie above (dedupe-mark.lua).
local COMMIT = 'commit'
local fields = {}
for i = 1, p do
  local from, commit = ARGV[4 + i], redis.call('ZSCORE', KEYS[i], COMMIT)
  if from ~= '' and commit and tonumber(commit) > tonumber(from) then
    redis.call('DEL', KEYS[i])
    fields[i] = ''
  else
    local offsets = {}
    for _, member in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
      if member ~= COMMIT then offsets[#offsets + 1] = member end
    end
    fields[i] = table.concat(offsets, ',')
  end
end
if shards > 0 then
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
