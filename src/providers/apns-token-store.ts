import type { RedisClient } from '../redis/client.ts';
import { toScriptError } from '../redis/script-errors.ts';
import { defineScripts, replyFields, scriptCall } from '../redis/scripts.ts';
import type { ProviderToken, ProviderTokenStore } from './apns-provider-token.ts';

/** Apple refuses a provider token older than an hour: the stored one is never kept longer. */
const TOKEN_TTL_SECONDS = 3600;

/**
 * The fleet's APNs provider token in Redis (`lua/apns-token.lua`): one key per signing key,
 * `<prefix>:apns-token:{<team id>.<key id>}`, holding `"<iat> <jwt>"` for at most an hour. The JWT is a
 * credential (it lets its holder push to the team's apps until it expires), so it is never logged and
 * `aqueduct inspect` does not show it.
 */
export class RedisProviderTokenStore implements ProviderTokenStore {
  private readonly call: ReturnType<typeof scriptCall>;
  private readonly key: string;

  constructor(redis: RedisClient, options: { prefix: string; teamId: string; keyId: string }) {
    defineScripts(redis);
    this.call = scriptCall(redis, 'apnsToken');
    this.key = providerTokenKey(options.prefix, options.teamId, options.keyId);
  }

  async share(candidate: ProviderToken, replaceBelow: number, established = false): Promise<ProviderToken> {
    // Kept no longer than the candidate is good for: an established token may be most of an hour old.
    const age = Math.floor(Date.now() / 1000) - candidate.iat;
    const ttlSeconds = Math.min(TOKEN_TTL_SECONDS, Math.max(1, TOKEN_TTL_SECONDS - age));
    let reply: unknown;
    try {
      reply = await this.call(
        1,
        this.key,
        candidate.jwt,
        candidate.iat,
        Math.max(0, replaceBelow),
        ttlSeconds,
        established ? 1 : 0,
      );
    } catch (error) {
      throw toScriptError(error, 'apnsToken');
    }
    const [iat, jwt] = replyFields(reply);
    return { jwt: jwt as string, iat: Number(iat) };
  }
}

/** The Redis key of the shared provider token of one signing key. */
export function providerTokenKey(prefix: string, teamId: string, keyId: string): string {
  return `${prefix}:apns-token:{${teamId}.${keyId}}`;
}
