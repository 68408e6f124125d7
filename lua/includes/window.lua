--[[
  window.lua: the idempotency window's layout, shared by dedupe-check, dedupe-mark and dedupe-forget.

  The window remembers each event with a final outcome as a 9-byte entry: the 8-byte fingerprint of
  its (tenant, id) (computed by the caller) and one outcome byte ('d' delivered, 'x' dead-lettered,
  'i' invalid token, '-' forgotten by a replay). A shard is one string key:

    <generation: 9 digits><start of the current generation's entries: 9 digits><entries...>

  A generation is `windowSeconds` of the Redis server's clock. Entries of the generation before the
  header's come first, then the header's own from the position it names. When a mark finds the
  string one generation behind, it rewrites it once: the old current entries become the previous ones
  and the older ones are dropped. A lookup reads the current and the previous generation, so an event is
  remembered for at least one window and at most two. A string costs its entries plus the allocator's
  slack (sds doubles the allocation while a string grows below 1 MiB): no per-event key, expiry or hash
  entry.

  Callers pass, per call, the shard keys in KEYS, a comma-separated count per shard, and one string of
  all the shards' fingerprints (or entries) in KEYS order.
]]

local ENTRY = 9
local HEADER = 18

-- The header of generation g whose current entries start at byte `start` (1-based).
local function generation_header(g, start)
  return string.format('%09d%09d', g % 1000000000, start)
end

-- The current generation by the server's clock.
local function current_generation(window_seconds)
  return math.floor(tonumber(redis.call('TIME')[1]) / window_seconds)
end

-- Where in shard text `text` (or nil) the entries still inside the window start at generation g, or
-- nil when none are.
local function live_start(text, g)
  if not text or #text < HEADER then return nil end
  local generation = tonumber(string.sub(text, 1, 9))
  if generation == g % 1000000000 then return HEADER + 1 end
  if generation == (g - 1) % 1000000000 then return tonumber(string.sub(text, 10, 18)) end
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

-- The position of fingerprint `fp`'s first live entry in `text` from `from` on, or nil. Forgotten
-- entries are passed over: the event may have been remembered again after one.
local function entry_position(text, fp, from)
  local at = next_entry(text, fp, from)
  while at and string.sub(text, at + 8, at + 8) == '-' do at = next_entry(text, fp, at + ENTRY) end
  return at
end

-- The counts per shard from their comma-separated text, checked against the shard keys and the
-- fingerprint (or entry) string of `size` bytes each; nil and a message when they do not add up.
local function shard_counts(text, shards, blob, size)
  local counts, total = {}, 0
  for count in string.gmatch(text, '[^,]+') do
    local n = tonumber(count)
    if not n or n < 1 or n % 1 ~= 0 then return nil, 'bad count "' .. count .. '"' end
    counts[#counts + 1] = n
    total = total + n
  end
  if #counts ~= shards then return nil, #counts .. ' counts for ' .. shards .. ' shard keys' end
  if #blob ~= total * size then return nil, #blob .. ' bytes for ' .. total .. ' items of ' .. size end
  return counts
end
