--[[
  apns-token: the APNs provider token every consumer process sends, so that a fleet signs one token per
  signing key and refresh period rather than one per process. Apple asks for a token to be refreshed no
  more than once every 20 minutes and no less than once every 60, and answers 429
  TooManyProviderTokenUpdates to updates more frequent than that.

  KEYS[1]   the shared token (<prefix>:apns-token:{<team id>.<key id>}), "<iat> <jwt>"
  ARGV[1]   a token the caller signed, to store when the stored one is missing or too old
  ARGV[2]   its iat (the JWT's issued-at, epoch seconds), an integer >= 0
  ARGV[3]   replaceBelow, an integer >= 0: a stored token whose iat is below this is replaced
  ARGV[4]   ttlSeconds, an integer >= 1: how long a token stored now is kept (Apple refuses it after an
            hour, so it is never needed longer)

  Returns   "<iat> <jwt>": the token now stored (the caller's or the one already there).
  Error replies (nothing is written; the format is includes/arguments.lua's):
    AQUEDUCT_ARGUMENT token <message>         ARGV[1] is empty or holds a space
    AQUEDUCT_ARGUMENT iat <message>           not an integer >= 0
    AQUEDUCT_ARGUMENT replaceBelow <message>  not an integer >= 0
    AQUEDUCT_ARGUMENT ttlSeconds <message>    not an integer >= 1
]]

--- @include "arguments"

if #KEYS ~= 1 or #ARGV ~= 4 then
  return argument_error('token', 'need 1 key and ARGV token, iat, replaceBelow, ttlSeconds; got '
    .. #KEYS .. ' keys and ' .. #ARGV .. ' ARGV')
end
if ARGV[1] == '' or string.find(ARGV[1], ' ', 1, true) then
  return argument_error('token', 'must be a non-empty text without spaces')
end
local failure = integer_error(2, 'iat', 0) or integer_error(3, 'replaceBelow', 0)
  or integer_error(4, 'ttlSeconds', 1)
if failure then return failure end

local stored = redis.call('GET', KEYS[1])
if stored then
  local space = string.find(stored, ' ', 1, true)
  local iat = space and tonumber(string.sub(stored, 1, space - 1))
  if iat and iat >= tonumber(ARGV[3]) then return stored end
end
local token = ARGV[2] .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'EX', ARGV[4])
return token
