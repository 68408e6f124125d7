import { describe, expect, it } from 'vitest';
import { IdempotencyKey } from '../../src/pipeline/idempotency-key.ts';
import { RecentKeys } from '../../src/pipeline/recent-keys.ts';

const key = (text: string) => new IdempotencyKey(text);

describe('RecentKeys', () => {
  it('knows the keys added and no others', () => {
    const recent = new RecentKeys(10_000);
    for (let i = 0; i < 4_000; i++) recent.add(key(`acme order-${i}`));
    for (let i = 0; i < 4_000; i++) expect(recent.has(key(`acme order-${i}`))).toBe(true);
    for (let i = 0; i < 4_000; i++) expect(recent.has(key(`globex order-${i}`))).toBe(false);
  });

  it('keeps the last generation whole and forgets the one before it', () => {
    const recent = new RecentKeys(100); // generations of 50
    for (let i = 0; i < 50; i++) recent.add(key(`a${i}`)); // the first generation, full: now the older one
    for (let i = 0; i < 49; i++) recent.add(key(`b${i}`));
    expect(recent.has(key('a0'))).toBe(true);
    expect(recent.has(key('b48'))).toBe(true);
    recent.add(key('b49')); // the second generation is full: the first is dropped
    expect(recent.has(key('a0'))).toBe(false);
    expect(recent.has(key('a49'))).toBe(false);
    for (let i = 0; i < 50; i++) expect(recent.has(key(`b${i}`))).toBe(true);
  });

  it('counts a key added twice once', () => {
    const recent = new RecentKeys(4); // generations of 2
    recent.add(key('x'));
    recent.add(key('x'));
    recent.add(key('y')); // fills the first generation
    recent.add(key('z'));
    expect(recent.has(key('x'))).toBe(true);
    expect(recent.has(key('y'))).toBe(true);
  });
});

describe('IdempotencyKey', () => {
  it('fingerprints with the first 8 bytes of SHA-1 and spreads over shards with bytes 8 to 11', () => {
    // sha1('acme order-42') = efa4565c f721cf6b b21b4b48 …
    const k = key('acme order-42');
    expect([k.high, k.low, k.spread].map((n) => n.toString(16).padStart(8, '0'))).toEqual([
      'efa4565c',
      'f721cf6b',
      'b21b4b48',
    ]);
    expect(String(k)).toBe('acme order-42');
  });
});
