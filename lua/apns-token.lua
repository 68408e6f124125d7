--[[
  apns-token: the APNs provider token every consumer process sends, so that a fleet signs one token per
  signing key and refresh period rather than one per process. Apple asks for a token to be refreshed no
  more than once every 20 minutes and no less than once every 60, and answers 429
  TooManyProviderTokenUpdates to updates more frequent than that.

  KEYS[1]   the shared token (<prefix>:apns-token:{<team id>.<key id>}), "<iat> <jwt> <floor>": floor
            is the replaceBelow it was stored with (tokens issued before it were renewed or refused)
  ARGV[1]   a token the caller signed, to store when the stored one is missing or too old
  ARGV[2]   its iat (the JWT's issued-at, epoch seconds), an integer >= 0
  ARGV[3]   replaceBelow, an integer >= 0: a stored token whose iat is below this is replaced
  ARGV[4]   ttlSeconds, an integer >= 1: how long a token stored now is kept (Apple refuses it after an
            hour, so it is never needed longer)
  ARGV[5]   established, 0 or 1: 1 when the caller already sends this token, taken from here earlier.
            Such a token also replaces a newer stored one when it is itself current (iat at least
            replaceBelow) and was not superseded (iat at least the stored floor): after the key was lost
            (Redis restarted empty, a failover), a process started since may have stored a token of its
            own, and the fleet goes back to the one APNs already knows instead of every process moving
            to a new token minutes after the last (an update APNs refuses). A renewal, or a token
            signed after APNs refused the old one as expired, sets a floor above the old token.
            A token the caller has just signed (0) replaces only a missing or too old one.

  Returns   "<iat> <jwt>": the token now stored (the caller's or the one already there).
  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT token <message>         ARGV[1] is empty or holds a space
    AQUEDUCT_ARGUMENT iat <message>           not an integer >= 0
    AQUEDUCT_ARGUMENT replaceBelow <message>  not an integer >= 0
    AQUEDUCT_ARGUMENT ttlSeconds <message>    not an integer >= 1
    AQUEDUCT_ARGUMENT established <message>   not 0 or 1
]]

--- @include "arguments"

if #KEYS ~= 1 or #ARGV ~= 5 then
  return argument_error('token', 'need 1 key and ARGV token, iat, replaceBelow, ttlSeconds, established; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
if ARGV[1] == '' or string.find(ARGV[1], ' ', 1, true) then
  return argument_error('token', 'must be a non-empty text without spaces')
end
local failure = integer_error(2, 'iat', 0) or integer_error(3, 'replaceBelow', 0)
  or integer_error(4, 'ttlSeconds', 1)
if failure then return failure end
if ARGV[5] ~= '0' and ARGV[5] ~= '1' then
  return argument_error('established', 'must be 0 or 1, got "' .. ARGV[5] .. '"')
end
local iat = tonumber(ARGV[2])
local replace_below = tonumber(ARGV[3])

local stored = redis.call('GET', KEYS[1])
if stored then
  local stored_iat, jwt, floor = string.match(stored, '^(%d+) (%S+) ?(%d*)$')
  stored_iat = tonumber(stored_iat)
  if stored_iat and stored_iat >= replace_below then
    -- A value without a floor counts as floored at its own iat: nothing older replaces it.
    floor = tonumber(floor) or stored_iat
    local older_in_use = ARGV[5] == '1' and iat >= replace_below and iat >= floor and iat < stored_iat
    if not older_in_use then return stored_iat .. ' ' .. jwt end
  end
end
redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3], 'EX', ARGV[4])
return ARGV[2] .. ' ' .. ARGV[1]
