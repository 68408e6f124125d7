--[[
  dedupe-forget: forgets that events were dead-lettered, so that a replayed copy is processed rather than
  skipped as a second copy (aqueduct replay). Entries of any other outcome stay: an event delivered in
  the meantime (another copy) must not be pushed again.

  KEYS        the idempotency window's shard keys (see includes/window.lua)
  ARGV[1]     windowSeconds, an integer >= 1
  ARGV[2]     the number of fingerprints per shard key, comma-separated
  ARGV[3]     the 8-byte fingerprints to forget, concatenated shard by shard in KEYS order

  Returns     the number of entries forgotten (their outcome byte becomes '-').
  Error replies (the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>         the counts, shard keys and fingerprints do not add up
    AQUEDUCT_ARGUMENT windowSeconds <message>  windowSeconds is not an integer >= 1
]]

--- @include "arguments"
--- @include "window"

if #ARGV ~= 3 or #KEYS == 0 then
  return argument_error('shards', 'need shard keys and ARGV windowSeconds, counts, fingerprints; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
local counts, problem = shard_counts(ARGV[2], #KEYS, ARGV[3], 8)
if not counts then return argument_error('shards', problem) end
local failure = integer_error(1, 'windowSeconds', 1)
if failure then return failure end
local g = current_generation(tonumber(ARGV[1]))
local fps, n, forgotten = ARGV[3], 0, 0
for s = 1, #KEYS do
  local text = redis.call('GET', KEYS[s])
  local from = live_start(text, g)
  for _ = 1, counts[s] do
    n = n + 1
    local fp = string.sub(fps, 8 * n - 7, 8 * n)
    local at = from and next_entry(text, fp, from)
    while at do
      if string.sub(text, at + 8, at + 8) == 'x' then
        redis.call('SETRANGE', KEYS[s], at + 7, '-')
        forgotten = forgotten + 1
      end
      at = next_entry(text, fp, at + ENTRY)
    end
  end
end
return forgotten
