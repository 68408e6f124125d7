import { createPublicKey, type KeyObject, verify as verifySignature } from 'node:crypto';
import type { SimulatorOptions } from './simulator.ts';

/** Apple refuses provider tokens older than an hour. */
const TOKEN_MAX_AGE_SECONDS = 3600;

/** How the simulator checks provider tokens (the `authorization: bearer <jwt>` header). */
export interface ProviderTokenOptions {
  /** With `verifyAuth`: the .p8 key (PEM; private or public) whose signature provider tokens must carry. */
  authKeyPem?: string;
  /** With `verifyAuth`: the key id (`kid`) tokens must name. Default: any. */
  keyId?: string;
  /** With `verifyAuth`: the team id (`iss`) tokens must name. Default: any. */
  teamId?: string;
  /**
   * The fewest seconds between two new provider tokens of one signing key (team and key id): a token
   * first seen sooner than that after the key's previous new one is answered 429
   * TooManyProviderTokenUpdates, every time it is sent (Apple: refresh a token no more than once every
   * 20 minutes). Default: no limit.
   */
  tokenUpdateMinSeconds?: number;
}

interface Jwt {
  iat: number;
  /** `<iss>.<kid>`: the signing key the token names. */
  signer: string;
}

/**
 * Checks the `authorization: bearer <jwt>` of a request; returns the APNs reason when it fails. A token
 * is reused for up to an hour, so the last good one is remembered and only its age is checked again.
 */
export function providerTokenChecker(
  options: ProviderTokenOptions & Pick<SimulatorOptions, 'verifyAuth'>,
): (header: string | string[] | undefined) => string | undefined {
  const verify = options.verifyAuth === true;
  let publicKey: KeyObject | undefined;
  if (verify) {
    if (!options.authKeyPem)
      throw new RangeError('verifyAuth needs authKeyPem (the .p8 key or its public key)');
    publicKey = createPublicKey(options.authKeyPem);
  }
  let lastToken = '';
  let lastIat = 0;
  const minUpdateMs = (options.tokenUpdateMinSeconds ?? 0) * 1000;
  /** Tokens accepted as updates (token → iat), and when each signer's last new token was accepted. */
  const accepted = new Map<string, number>();
  const lastUpdateAt = new Map<string, number>();
  const isTooSoon = (token: string, jwt: Jwt): boolean => {
    if (minUpdateMs === 0 || accepted.has(token)) return false;
    const now = Date.now();
    const previous = lastUpdateAt.get(jwt.signer);
    if (previous !== undefined && now - previous < minUpdateMs) return true;
    lastUpdateAt.set(jwt.signer, now);
    for (const [known, iat] of accepted) if (now / 1000 - iat > TOKEN_MAX_AGE_SECONDS) accepted.delete(known);
    accepted.set(token, jwt.iat);
    return false;
  };
  return (header) => {
    if (typeof header !== 'string' || header === '') return 'MissingProviderToken';
    const match = /^bearer\s+(\S+)$/i.exec(header);
    if (!match) return 'InvalidProviderToken';
    const token = match[1] as string;
    if (token !== lastToken) {
      const parsed = parseJwt(token, publicKey, options);
      if (typeof parsed === 'string') return parsed;
      if (isTooSoon(token, parsed)) return 'TooManyProviderTokenUpdates';
      lastToken = token;
      lastIat = parsed.iat;
    }
    if (verify && Date.now() / 1000 - lastIat > TOKEN_MAX_AGE_SECONDS) return 'ExpiredProviderToken';
    return undefined;
  };
}

function parseJwt(
  token: string,
  publicKey: KeyObject | undefined,
  options: ProviderTokenOptions,
): Jwt | string {
  const parts = token.split('.');
  if (parts.length !== 3 || parts.some((part) => !/^[A-Za-z0-9_-]+$/.test(part)))
    return 'InvalidProviderToken';
  const [head, claims, signature] = parts as [string, string, string];
  let header: Record<string, unknown>;
  let payload: Record<string, unknown>;
  try {
    header = JSON.parse(Buffer.from(head, 'base64url').toString('utf8')) as Record<string, unknown>;
    payload = JSON.parse(Buffer.from(claims, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return 'InvalidProviderToken';
  }
  if (header.alg !== 'ES256' || typeof header.kid !== 'string') return 'InvalidProviderToken';
  if (typeof payload.iss !== 'string' || typeof payload.iat !== 'number') return 'InvalidProviderToken';
  if (publicKey) {
    const signed = verifySignature(
      'sha256',
      Buffer.from(`${head}.${claims}`),
      { key: publicKey, dsaEncoding: 'ieee-p1363' },
      Buffer.from(signature, 'base64url'),
    );
    if (!signed) return 'InvalidProviderToken';
    if (options.keyId !== undefined && header.kid !== options.keyId) return 'InvalidProviderToken';
    if (options.teamId !== undefined && payload.iss !== options.teamId) return 'InvalidProviderToken';
  }
  return { iat: payload.iat, signer: `${payload.iss}.${header.kid}` };
}
