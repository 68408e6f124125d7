import { describe, expect, it } from 'vitest';
import { defaultFaults, mergeFaults } from '../../src/simulators/faults.ts';
import { TokenBucket } from '../../src/simulators/token-bucket.ts';

describe('simulator token bucket (continuous refill)', () => {
  it('grants exactly the burst at once, then one token per 1/rate seconds', () => {
    const bucket = new TokenBucket(10, 5, 0);
    const decisions = Array.from({ length: 8 }, () => bucket.take(0));
    expect(decisions).toEqual([0, 0, 0, 0, 0, 1, 1, 1]);
    expect(bucket.take(99)).toBe(1); // 0.99 of a token: not yet
    expect(bucket.take(100)).toBe(0); // 1 token after 100 ms at 10/s
    expect(bucket.take(100)).toBe(1);
  });

  it('refills continuously and never above the burst', () => {
    const bucket = new TokenBucket(800, 2000, 0);
    for (let i = 0; i < 2000; i += 1) expect(bucket.take(0)).toBe(0);
    expect(bucket.take(0)).toBe(1);
    // 1.25 ms at 800/s is exactly one token.
    expect(bucket.take(1.25)).toBe(0);
    expect(bucket.available(1_000_000)).toBe(2000);
  });

  it('answers the whole seconds until a token is there (Retry-After), at least 1', () => {
    const slow = new TokenBucket(0.1, 1, 0);
    expect(slow.take(0)).toBe(0);
    expect(slow.take(0)).toBe(10);
    expect(slow.take(5000)).toBe(5);
  });

  it('matches a reference replay for an arbitrary arrival sequence', () => {
    const rate = 50;
    const burst = 7;
    const bucket = new TokenBucket(rate, burst, 0);
    let tokens = burst;
    let last = 0;
    let t = 0;
    for (let i = 0; i < 2000; i += 1) {
      t += (i * 7919) % 37; // deterministic, uneven gaps in ms
      tokens = Math.min(burst, tokens + ((t - last) * rate) / 1000);
      last = t;
      const granted = tokens >= 1;
      if (granted) tokens -= 1;
      expect(bucket.take(t) === 0, `arrival ${i} at ${t} ms`).toBe(granted);
    }
  });

  it('refuses nonsense limits', () => {
    expect(() => new TokenBucket(0, 1, 0)).toThrow(RangeError);
    expect(() => new TokenBucket(1, 0.5, 0)).toThrow(RangeError);
  });
});

describe('simulator faults', () => {
  it('merges a partial update and checks every value', () => {
    const faults = mergeFaults(defaultFaults(), { error503: 0.25, storm: { retryAfterSeconds: 2.2 } });
    expect(faults).toMatchObject({
      error503: 0.25,
      error500: 0,
      deadTokenPrefix: 'dead-',
      storm: { retryAfterSeconds: 3 },
    });
    expect(mergeFaults(faults, { storm: null }).storm).toBeNull();
    expect(() => mergeFaults(faults, { drop: 2 })).toThrow(RangeError);
    expect(() => mergeFaults(faults, { slowMs: -1 })).toThrow(RangeError);
    expect(() => mergeFaults(faults, { deadTokenPrefix: 3 as unknown as string })).toThrow(RangeError);
  });
});
