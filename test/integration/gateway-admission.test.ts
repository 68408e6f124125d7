import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TenantAdmission } from '../../src/gateway/admission.ts';
import { TokenBucketLimiter } from '../../src/limiter/index.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

let redis: TestRedis;
let limiter: TokenBucketLimiter;

beforeAll(() => {
  redis = testRedis('admission');
  limiter = new TokenBucketLimiter(redis.client, { keyPrefix: redis.prefix.slice(0, -1) });
});

afterAll(async () => {
  await redis.cleanup();
});

/** The real limiter, counting the acquires that reach Redis. */
function countingLimiter(): { limiter: TokenBucketLimiter; acquires: () => number } {
  let acquires = 0;
  const counting = Object.create(limiter) as TokenBucketLimiter;
  counting.acquire = (...args: Parameters<TokenBucketLimiter['acquire']>) => {
    acquires++;
    return limiter.acquire(...args);
  };
  return { limiter: counting, acquires: () => acquires };
}

describe('gateway admission against Redis', () => {
  it('refuses a throttled tenant again without asking Redis until its bucket can hold the request', async () => {
    const { limiter: counting, acquires } = countingLimiter();
    const admission = new TenantAdmission({ limiter: counting, defaultLimit: { rate: 4, burst: 2 } });
    expect((await admission.admitRequest('flood')).kind).toBe('admitted');
    expect((await admission.admitRequest('flood')).kind).toBe('admitted');
    const first = await admission.admitRequest('flood');
    expect(first).toMatchObject({ kind: 'throttled', retryAfterSeconds: 1 });
    const asked = acquires();
    const again = [];
    for (let i = 0; i < 50; i++) again.push(await admission.admitRequest('flood'));
    expect(again.every((answer) => answer.kind === 'throttled')).toBe(true);
    expect(acquires()).toBe(asked);
    // Another tenant has a bucket of its own, and asks Redis.
    expect((await admission.admitRequest('quiet')).kind).toBe('admitted');
    expect(acquires()).toBe(asked + 1);
    // A token refills in 250 ms: then the tenant is asked about again, and admitted.
    await sleep(300);
    expect((await admission.admitRequest('flood')).kind).toBe('admitted');
    expect(acquires()).toBe(asked + 2);
  });

  it('asks Redis again once tokens were given back', async () => {
    const { limiter: counting, acquires } = countingLimiter();
    const admission = new TenantAdmission({ limiter: counting, defaultLimit: { rate: 0.5, burst: 1 } });
    expect((await admission.admitRequest('kafka-down')).kind).toBe('admitted');
    expect((await admission.admitRequest('kafka-down')).kind).toBe('throttled');
    await admission.giveBack('kafka-down', 1);
    const asked = acquires();
    expect((await admission.admitRequest('kafka-down')).kind).toBe('admitted');
    expect(acquires()).toBe(asked + 1);
  });
});
