--[[
  number-text.lua: numbers in replies and hash fields. A Lua number returned to Redis would be
  truncated to an integer, so the scripts answer with decimal texts.
]]

-- Beyond this not every integer is a double.
local MAX_EXACT_INTEGER = 9007199254740992

-- x as decimal text that reads back as the same double: a whole number with the cheaper %d, anything
-- else with 17 significant digits (tostring keeps only 14).
local function number_text(x)
  if x % 1 == 0 and x < MAX_EXACT_INTEGER and x > -MAX_EXACT_INTEGER then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end
