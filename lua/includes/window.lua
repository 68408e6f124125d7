--[[
  window.lua: the idempotency window's layout, shared by dedupe-check, dedupe-mark and dedupe-forget.

  The window remembers each event with a final outcome as a 9-byte entry: the 8-byte fingerprint of
  its (tenant, id) (computed by the caller) and one outcome byte ('d' delivered, 'x' dead-lettered,
  'i' invalid token, '-' forgotten by a replay). Entries are appended to one string per shard and
  generation; a generation is `windowSeconds` of the Redis server's clock. A shard has two keys: the
  even generations live in the first, the odd ones in the second, and each string starts with a 9-byte
  header naming its generation, so the key of generation g - 2 is simply overwritten by generation g.
  A lookup reads the current and the previous generation: an event is remembered for at least one
  window and at most two. A string costs its entries plus the allocator's slack (sds doubles the
  allocation while a string grows below 1 MiB), and no per-event key, expiry or hash entry.
]]

local ENTRY = 9
local HEADER = 9

-- The header of generation g: nine decimal digits (g modulo 10^9; only equality matters).
local function generation_header(g)
  return string.format('%09d', g % 1000000000)
end

-- The current generation by the server's clock.
local function current_generation(window_seconds)
  return math.floor(tonumber(redis.call('TIME')[1]) / window_seconds)
end

-- The text of shard key `key` when it holds generation g, else nil.
local function generation_text(key, g)
  local text = redis.call('GET', key)
  if text and string.sub(text, 1, HEADER) == generation_header(g) then return text end
  return nil
end

-- The 1-based position of the first entry of fingerprint `fp` at or after `from`, or nil. Only
-- positions on an entry boundary count: a fingerprint's bytes may also occur across two entries.
local function next_entry(text, fp, from)
  while true do
    local at = string.find(text, fp, from, true)
    if not at then return nil end
    if (at - HEADER - 1) % ENTRY == 0 then return at end
    from = at + 1
  end
end

-- The position of fingerprint `fp`'s first live entry in `text`, or nil. Forgotten entries are passed
-- over: the event may have been remembered again after one.
local function entry_position(text, fp)
  local at = next_entry(text, fp, HEADER + 1)
  while at and string.sub(text, at + 8, at + 8) == '-' do at = next_entry(text, fp, at + ENTRY) end
  return at
end
