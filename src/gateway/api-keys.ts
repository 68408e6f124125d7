import { createHash } from 'node:crypto';

/**
 * API keys. The gateway never stores a key, only its SHA-256: keys are long random strings (high
 * entropy), so a fast hash cannot be reversed by guessing, and one hash per request costs microseconds
 * where a password hash (scrypt) would cost milliseconds. A caller sends the key as
 * `Authorization: Bearer <key>` or `X-API-Key: <key>`.
 */

/** The lower-case hex SHA-256 of an API key: what AQUEDUCT_GATEWAY_API_KEYS maps to a tenant. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/**
 * How many credential field lines a request carries: its `Authorization` and `X-API-Key` lines
 * together. More than one is refused (RFC 6750 §3.1 `invalid_request`: a request that "repeats the same
 * parameter, uses more than one method for including an access token"): Node keeps only the first of
 * two `Authorization` lines and a proxy in front may keep the last, so the two would not agree on who
 * the caller is.
 */
export function credentialFieldLines(rawHeaders: readonly string[]): number {
  let lines = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]?.toLowerCase();
    if (name === 'authorization' || name === 'x-api-key') lines++;
  }
  return lines;
}

/** Who a request is. */
export type Authentication =
  | { ok: true; tenant: string }
  | { ok: false; reason: 'missing' | 'unknown' | 'malformed'; message: string };

/** The configured keys (by hash) and the tenant each belongs to. */
export class ApiKeys {
  private readonly tenantByHash: ReadonlyMap<string, string>;

  constructor(tenantByHash: ReadonlyMap<string, string>) {
    this.tenantByHash = tenantByHash;
  }

  /** How many keys are configured. */
  get size(): number {
    return this.tenantByHash.size;
  }

  /**
   * The tenant of the key in `authorization` (`Bearer <key>`) or `x-api-key`. The key itself never
   * appears in the answer.
   */
  authenticate(headers: {
    authorization?: string | undefined;
    'x-api-key'?: string | string[] | undefined;
  }): Authentication {
    const key = presentedKey(headers);
    if (key === MALFORMED_BEARER) {
      return {
        ok: false,
        reason: 'malformed',
        message: 'the Authorization field is not "Bearer <key>": one key, no spaces in it',
      };
    }
    if (key === undefined) {
      return {
        ok: false,
        reason: 'missing',
        message: 'an API key is required: send "Authorization: Bearer <key>" or "X-API-Key: <key>"',
      };
    }
    const tenant = this.tenantByHash.get(hashApiKey(key));
    if (tenant === undefined) return { ok: false, reason: 'unknown', message: 'the API key is not valid' };
    return { ok: true, tenant };
  }
}

/** What {@link presentedKey} answers for a Bearer field that holds no key or more than one word. */
const MALFORMED_BEARER = Symbol('malformed bearer credentials');

/**
 * The key a request presents. A field of the Bearer scheme must hold exactly one key (RFC 6750 §2.1,
 * `"Bearer" 1*SP b64token`); one that does not is malformed (§3.1 `invalid_request`), never read as
 * no key. A field of another scheme is no Bearer key at all (§3.1: an unsupported method is a missing
 * credential); the app refuses it beside `X-API-Key` (see credentialFieldLines).
 */
function presentedKey(headers: {
  authorization?: string | undefined;
  'x-api-key'?: string | string[] | undefined;
}): string | typeof MALFORMED_BEARER | undefined {
  const authorization = headers.authorization;
  if (authorization !== undefined && /^Bearer(?:\s|$)/i.test(authorization)) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return match ? match[1] : MALFORMED_BEARER;
  }
  const header = headers['x-api-key'];
  const value = Array.isArray(header) ? header[0] : header;
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}
