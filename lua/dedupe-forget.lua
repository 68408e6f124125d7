--[[
  dedupe-forget: forgets that events were dead-lettered, so that a replayed copy is processed rather than
  skipped as a second copy (aqueduct replay). Entries of any other outcome stay: an event delivered in
  the meantime (another copy) must not be pushed again.

  KEYS         the idempotency window's shard keys, two per shard (see includes/window.lua)
  ARGV[1]      windowSeconds, an integer >= 1
  ARGV[2..]    per shard, in KEYS order: the 8-byte fingerprints to forget, concatenated

  Returns      the number of entries forgotten (their outcome byte becomes '-').
  Error replies (the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT shards <message>         the shard keys and fingerprint strings do not pair up
    AQUEDUCT_ARGUMENT windowSeconds <message>  windowSeconds is not an integer >= 1
]]

--- @include "arguments"
--- @include "window"

local shards = #KEYS / 2
if shards % 1 ~= 0 or #ARGV ~= 1 + shards then
  return argument_error('shards', 'need windowSeconds and one fingerprint string per shard key pair; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
local failure = integer_error(1, 'windowSeconds', 1)
if failure then return failure end
local g = current_generation(tonumber(ARGV[1]))
local forgotten = 0
for s = 1, shards do
  local fps = ARGV[1 + s]
  for _, pair in ipairs({ { 2 * s - 1 + g % 2, g }, { 2 * s - 1 + (g - 1) % 2, g - 1 } }) do
    local key = KEYS[pair[1]]
    local text = generation_text(key, pair[2])
    if text then
      for j = 1, #fps / 8 do
        local fp = string.sub(fps, 8 * j - 7, 8 * j)
        local at = next_entry(text, fp, HEADER + 1)
        while at do
          if string.sub(text, at + 8, at + 8) == 'x' then
            redis.call('SETRANGE', key, at + 7, '-')
            forgotten = forgotten + 1
          end
          at = next_entry(text, fp, at + ENTRY)
        end
      end
    end
  end
end
return forgotten
