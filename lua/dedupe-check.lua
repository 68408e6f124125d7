--[[
  dedupe-check: what an earlier reading already finished, asked once for many events.

  KEYS[1..p]        finished-offset sets of the partitions read for the first time in this assignment
                    (<prefix>:{p:<topic>:<partition>}:finished:<group>, sorted sets of offsets)
  KEYS[p+1..]       the idempotency window's shard keys, two per shard (even and odd generations, see
                    includes/window.lua): <prefix>:{w<tag>}:<shard>:0 and :1
  ARGV[1]           p, the number of finished-offset sets
  ARGV[2]           windowSeconds, an integer >= 1 (ignored when no shard key is given)
  ARGV[3..]         per shard, in KEYS order: the 8-byte fingerprints to look up, concatenated

  Returns     one string of fields separated by single spaces (see replyFields in src/redis/scripts.ts):
              for each finished-offset set, its offsets joined by ','; then for each shard one character
              per fingerprint: the outcome byte found ('d', 'x', 'i') or '-' when there is none.
  Error replies (the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>         the shard keys and fingerprint strings do not pair up
    AQUEDUCT_ARGUMENT windowSeconds <message>  windowSeconds is not an integer >= 1

  A partition's finished offsets are read once per assignment: while a consumer owns the partition, it
  is the only writer. The window is read for every event, once per fetched batch.
]]

--- @include "arguments"
--- @include "window"

local p = tonumber(ARGV[1])
local shards = (#KEYS - p) / 2
if p == nil or p < 0 or shards % 1 ~= 0 or #ARGV ~= 2 + shards then
  return argument_error('shards', 'need ARGV p, windowSeconds, then one fingerprint string per shard key pair; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
local fields = {}
for i = 1, p do
  fields[i] = table.concat(redis.call('ZRANGE', KEYS[i], 0, -1), ',')
end
if shards > 0 then
  local failure = integer_error(2, 'windowSeconds', 1)
  if failure then return failure end
  local g = current_generation(tonumber(ARGV[2]))
  local current_header, previous_header = generation_header(g), generation_header(g - 1)
  -- One MGET for every shard key: a call per key costs more than the scans.
  local texts = redis.call('MGET', unpack(KEYS, p + 1, #KEYS))
  local function live(index, header)
    local text = texts[index]
    if text and string.sub(text, 1, HEADER) == header then return text end
    return ''
  end
  for s = 1, shards do
    local current = live(2 * s - 1 + g % 2, current_header)
    local previous = live(2 * s - 1 + (g - 1) % 2, previous_header)
    local fps = ARGV[2 + s]
    local found = {}
    for j = 1, #fps / 8 do
      local fp = string.sub(fps, 8 * j - 7, 8 * j)
      local at = entry_position(current, fp)
      local text = current
      if not at then
        at = entry_position(previous, fp)
        text = previous
      end
      found[j] = at and string.sub(text, at + 8, at + 8) or '-'
    end
    fields[p + s] = table.concat(found)
  end
end
return table.concat(fields, ' ')
