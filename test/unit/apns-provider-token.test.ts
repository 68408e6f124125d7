import { createPublicKey, verify } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type ProviderToken,
  type ProviderTokenStore,
  providerTokenSigner,
  RENEW_AFTER_SECONDS,
  SharedProviderToken,
} from '../../src/providers/apns-provider-token.ts';
import { throwAwaySigningKey } from '../../src/providers/index.ts';

// The store is Redis in the consumer; lua/apns-token.lua's rule is stood in for here, and the real
// script is tested against Redis (single node and Cluster) in test/integration/provider-apns.test.ts.
class MemoryStore implements ProviderTokenStore {
  stored: ProviderToken | undefined;
  /** The replaceBelow the stored token was stored with. */
  floor = 0;
  calls = 0;
  failing = false;
  async share(candidate: ProviderToken, replaceBelow: number, established = false): Promise<ProviderToken> {
    this.calls += 1;
    if (this.failing) throw new Error('Connection is closed.');
    const olderInUse =
      established &&
      candidate.iat >= replaceBelow &&
      candidate.iat >= this.floor &&
      candidate.iat < (this.stored?.iat ?? 0);
    if (!this.stored || this.stored.iat < replaceBelow || olderInUse) {
      this.stored = candidate;
      this.floor = replaceBelow;
    }
    return this.stored;
  }
  /** What Redis restarting empty does to the key. */
  lose(): void {
    this.stored = undefined;
    this.floor = 0;
  }
}

const keyPem = throwAwaySigningKey();
const sign = providerTokenSigner({ keyPem, keyId: 'KEY1234567', teamId: 'TEAM123456' });
const open: SharedProviderToken[] = [];
const shared = (store: ProviderTokenStore, clock: { ms: number }, checkEveryMs = 60_000) => {
  const token = new SharedProviderToken(sign, store, { now: () => clock.ms, checkEveryMs });
  open.push(token);
  return token;
};
afterEach(() => {
  for (const token of open.splice(0)) token.close();
});

describe('APNs provider tokens', () => {
  it('signs ES256 over { alg, kid }.{ iss, iat }, verifiable with the key', () => {
    const { jwt, iat } = sign(1_700_000_000);
    const [head, claims, signature] = jwt.split('.') as [string, string, string];
    expect(JSON.parse(Buffer.from(head, 'base64url').toString())).toEqual({
      alg: 'ES256',
      kid: 'KEY1234567',
    });
    expect(JSON.parse(Buffer.from(claims, 'base64url').toString())).toEqual({
      iss: 'TEAM123456',
      iat: 1_700_000_000,
    });
    expect(iat).toBe(1_700_000_000);
    const ok = verify(
      'sha256',
      Buffer.from(`${head}.${claims}`),
      { key: createPublicKey(keyPem), dsaEncoding: 'ieee-p1363' },
      Buffer.from(signature, 'base64url'),
    );
    expect(ok).toBe(true);
  });

  it('gives every process of a fleet the token the first one stored', async () => {
    const store = new MemoryStore();
    const clock = { ms: 1_700_000_000_000 };
    const first = shared(store, clock);
    await first.ready;
    clock.ms += 90_000;
    const second = shared(store, clock);
    await second.ready;
    expect(second.current).toBe(first.current);
    expect(second.current).toBe(store.stored?.jwt);
  });

  it('renews the shared token once it is 40 minutes old, and the others take the renewed one', async () => {
    const store = new MemoryStore();
    const clock = { ms: 1_700_000_000_000 };
    const first = shared(store, clock, 5);
    const second = shared(store, clock, 5);
    await Promise.all([first.ready, second.ready]);
    const original = first.current;
    clock.ms += (RENEW_AFTER_SECONDS - 60) * 1000;
    await sleep(30);
    expect([first.current, second.current]).toEqual([original, original]);
    clock.ms += 60_000;
    await sleep(30);
    expect(first.current).not.toBe(original);
    expect(second.current).toBe(first.current);
    expect(store.stored?.iat).toBe(Math.floor(clock.ms / 1000));
    // node-apn sees a new generation, so a 403 for the old token does not renew the new one again.
    expect(first.generation).toBe(1);
  });

  it('after the store lost its token, the fleet keeps the one it sends, and a process started since takes it', async () => {
    const store = new MemoryStore();
    const clock = { ms: 1_700_000_000_000 };
    const first = shared(store, clock, 5);
    const second = shared(store, clock, 5);
    await Promise.all([first.ready, second.ready]);
    const sent = first.current;
    // Redis restarted empty; a process started a minute and a half later stores a token of its own.
    store.lose();
    clock.ms += 90_000;
    const started = shared(store, clock, 5);
    await started.ready;
    expect(started.current).not.toBe(sent);
    await sleep(40);
    expect([first.current, second.current, started.current]).toEqual([sent, sent, sent]);
    expect(store.stored?.jwt).toBe(sent);
    expect(first.generation).toBe(0);
  });

  it('reads the store again when APNs refuses the token as too frequent an update, at most every 5 s', async () => {
    const store = new MemoryStore();
    const clock = { ms: 1_700_000_000_000 };
    const token = shared(store, clock);
    await token.ready;
    const before = store.calls;
    token.refused();
    token.refused();
    await sleep(10);
    expect(store.calls).toBe(before + 1);
    clock.ms += 5000;
    token.refused();
    await sleep(10);
    expect(store.calls).toBe(before + 2);
  });

  it('after an ExpiredProviderToken, signs a fresh token at once and shares it; an older generation is ignored', async () => {
    const store = new MemoryStore();
    const clock = { ms: 1_700_000_000_000 };
    const first = shared(store, clock);
    const second = shared(store, clock, 5);
    await Promise.all([first.ready, second.ready]);
    const expired = first.current;
    clock.ms += 1000;
    first.regenerate(first.generation);
    const renewed = first.current;
    expect(renewed).not.toBe(expired);
    first.regenerate(0);
    expect(first.current).toBe(renewed);
    await sleep(30);
    expect(store.stored?.jwt).toBe(renewed);
    expect(second.current).toBe(renewed);
  });

  it('goes on with a token of its own while the store cannot be reached, and renews it itself', async () => {
    const store = new MemoryStore();
    store.failing = true;
    const errors: unknown[] = [];
    const clock = { ms: 1_700_000_000_000 };
    const token = new SharedProviderToken(sign, store, {
      now: () => clock.ms,
      checkEveryMs: 5,
      onStoreError: (error) => errors.push(error),
    });
    open.push(token);
    await token.ready;
    const own = token.current;
    expect(own.split('.')).toHaveLength(3);
    expect(errors.length).toBeGreaterThan(0);
    clock.ms += RENEW_AFTER_SECONDS * 1000;
    await sleep(30);
    expect(token.current).not.toBe(own);
    expect(token.isExpired(3300)).toBe(false);
  });

  it('is ready after storeTimeoutMs when the store does not answer', async () => {
    const never: ProviderTokenStore = { share: () => new Promise(() => {}) };
    const token = new SharedProviderToken(sign, never, { storeTimeoutMs: 20 });
    open.push(token);
    await token.ready;
    expect(token.current.split('.')).toHaveLength(3);
  });

  it('tells node-apn a token is expired at the age it asks about, at most 55 minutes', () => {
    const clock = { ms: 1_700_000_000_000 };
    const token = shared(new MemoryStore(), clock);
    clock.ms += 3299_000;
    expect(token.isExpired(3300)).toBe(false);
    clock.ms += 1000;
    expect(token.isExpired(3300)).toBe(true);
    expect(token.isExpired(7200)).toBe(true);
  });
});
