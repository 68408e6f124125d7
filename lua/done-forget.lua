--[[
  done-forget: forget that events were dead-lettered, so that a replayed copy is not skipped as a
  duplicate (aqueduct replay). Marks of any other outcome stay: an event that was delivered in the
  meantime (another copy) must not be pushed again.

  KEYS[1..n]  done-mark keys, one per event: <prefix>:{done}:<event id>
  ARGV        none

  Returns     the number of marks removed.
  Errors      none of its own.
]]
local removed = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == 'dead-lettered' then
    redis.call('DEL', KEYS[i])
    removed = removed + 1
  end
end
return removed
