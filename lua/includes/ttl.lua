--[[
  ttl.lua: how long bucket keys live. Every key a script writes gets a TTL, so that a bucket nobody
  uses any more disappears by itself.
]]

-- EXPIRE takes at most this many seconds without overflowing.
local MAX_TTL_SECONDS = 2147483647

-- The TTL (s) of a bucket written at `now_ms`: max(min_ttl, ceil(2 * capacity / rate), until its active
-- block, if any, ends + 1 s). A bucket left alone for ttl / 2 >= capacity / rate seconds would be full
-- again anyway, so its expiry loses nothing. rate and capacity may be numeric texts.
local function bucket_ttl(rate, capacity, min_ttl, block, now_ms)
  local ttl = math.ceil(2 * capacity / rate)
  if ttl < min_ttl then ttl = min_ttl end
  if block and block > now_ms then
    local until_block = math.ceil((block - now_ms) / 1000) + 1
    if until_block > ttl then ttl = until_block end
  end
  if ttl > MAX_TTL_SECONDS then ttl = MAX_TTL_SECONDS end
  return ttl
end
