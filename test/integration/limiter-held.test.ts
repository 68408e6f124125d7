import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BucketSpec, TokenBucketLimiter } from '../../src/limiter/index.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

// The provider's bucket remembers what its holders hold (its refill stops at capacity − held) and
// slows down after a project-wide throttle: lua/includes/provider-bucket.lua, against a real Redis.

let redis: TestRedis;
let prefix: string;

beforeAll(() => {
  redis = testRedis('limiter-held');
  prefix = redis.prefix.slice(0, -1);
});

afterAll(async () => {
  await redis.cleanup();
});

/** A bucket that refills in 10 ms, so that any wait below refills it whole unless something holds it back. */
const fast = (name: string): BucketSpec => ({ name, rate: 1000, capacity: 10 });

describe('holders', () => {
  it('cap the refill at capacity minus what they hold, as each last reported it', async () => {
    const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
    const bucket = [fast('held')];
    const a = await limiter.acquire(bucket, 10, { holder: 'a' });
    expect(a.granted).toBe(10);
    expect(await redis.client.hget(limiter.keyOf('held'), 'held:a')).toMatch(/^10 \d+$/);
    await sleep(50);
    // a still holds all 10 (nothing answered): the bucket has not refilled at all.
    expect((await limiter.acquire(bucket, 10, { holder: 'b' })).granted).toBe(0);
    // a's sends are answered but 4: from now on the bucket refills up to 6.
    await limiter.refund(bucket, 0, { holder: 'a', held: 4 });
    await sleep(50);
    expect((await limiter.acquire(bucket, 10, { holder: 'b' })).granted).toBe(6);
    const [state] = await limiter.inspect('held');
    expect(state?.held).toBe(10); // a's 4 and b's 6
    // Both report holding nothing: their entries go, and the bucket refills whole.
    await limiter.refund(bucket, 0, { holder: 'a', held: 0 });
    await limiter.refund(bucket, 0, { holder: 'b', held: 0 });
    const fields = Object.keys(await redis.client.hgetall(limiter.keyOf('held')));
    expect(fields.filter((field) => field.startsWith('held:'))).toEqual([]);
    await sleep(50);
    expect((await limiter.acquire(bucket, 10)).granted).toBe(10);
  });

  it('count only until their lease runs out (a crashed consumer stops holding the bucket back)', async () => {
    const leased = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, holderLeaseMs: 100 });
    const bucket = [fast('lease')];
    expect((await leased.acquire(bucket, 10, { holder: 'crashed' })).granted).toBe(10);
    await sleep(50);
    expect((await leased.acquire(bucket, 10)).granted).toBe(0);
    await sleep(200);
    // The lease ran out: the refill since then counts, and the lapsed entry is removed.
    expect((await leased.acquire(bucket, 10)).granted).toBeGreaterThan(0);
    expect(await redis.client.hexists(leased.keyOf('lease'), 'held:crashed')).toBe(0);
  });

  it("hold back only the first bucket of a call (the provider's), not a tenant's", async () => {
    const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
    const buckets = [fast('pair'), fast('pair:tenant:acme')];
    expect((await limiter.acquire(buckets, 6, { holder: 'a' })).granted).toBe(6);
    await sleep(50);
    const result = await limiter.acquire(buckets, 0);
    expect(result.tokensLeft).toEqual([4, 10]);
  });
});

describe('turns', () => {
  it('tell a short holder to come back after the refill promised to other short holders, until they are served', async () => {
    const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
    const bucket: BucketSpec[] = [{ name: 'turns', rate: 100, capacity: 100 }];
    await limiter.acquire(bucket, 100); // empty
    const a = await limiter.acquire(bucket, 50, { holder: 'a', waitFor: 50 });
    const b = await limiter.acquire(bucket, 50, { holder: 'b', waitFor: 50 });
    expect(a.granted + b.granted).toBeLessThan(10);
    // a comes back after 0.5 s of refill; b after the refill promised to a, and then its own.
    expect(a.waitMs).toBeGreaterThan(400);
    expect(b.waitMs).toBeGreaterThan(a.waitMs + 400);
    const key = limiter.keyOf('turns');
    expect(await redis.client.hexists(key, 'promised:a')).toBe(1);
    // A holder without a name takes no turn and waits for the refill alone.
    const anonymous = await limiter.acquire(bucket, 50, { waitFor: 50 });
    expect(anonymous.waitMs).toBeLessThan(a.waitMs + 100);
    await sleep(a.waitMs);
    expect((await limiter.acquire(bucket, 40, { holder: 'a', waitFor: 40 })).granted).toBe(40);
    expect(await redis.client.hexists(key, 'promised:a')).toBe(0); // served: its turn is over
    await limiter.refund(bucket, 0, { holder: 'b', held: 0 }); // b wants nothing more
    expect(await redis.client.hexists(key, 'promised:b')).toBe(0);
  });

  it("size a short holder's turn by what it still lacks, not by a larger waitFor", async () => {
    const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
    const bucket: BucketSpec[] = [{ name: 'nearly', rate: 10, capacity: 100 }];
    await limiter.acquire(bucket, 60); // 40 left, refilling at 10/s
    const nearly = await limiter.acquire(bucket, 45, { holder: 'c', waitFor: 100 });
    expect(nearly.granted).toBeGreaterThanOrEqual(40);
    expect(nearly.granted).toBeLessThan(45);
    // Short by at most 5 tokens: half a second of refill, not the 10 s that 100 tokens would take.
    expect(nearly.waitMs).toBeLessThan(1000);
    // The next short holder comes after that short turn and then its own 50 tokens (5 s).
    const next = await limiter.acquire(bucket, 50, { holder: 'd', waitFor: 50 });
    expect(next.waitMs).toBeGreaterThan(5000);
    expect(next.waitMs).toBeLessThan(6500);
  });
});

describe('the rate cut of a project-wide throttle', () => {
  it('slows the refill to the cut share, once per overrun, then climbs back to the whole rate', async () => {
    const limiter = new TokenBucketLimiter(redis.client, {
      keyPrefix: prefix,
      adaptiveRate: { cut: 0.5, holdMs: 300, recoveryPerSecond: 2 },
    });
    const bucket: BucketSpec[] = [{ name: 'cut', rate: 100, capacity: 1000 }];
    await limiter.acquire(bucket, 1000); // empty
    await limiter.blockUntil(bucket, 0);
    await limiter.blockUntil(bucket, 0); // the same overrun's second 429: no second cut
    const [cut] = await limiter.inspect('cut');
    expect(cut?.rateFactor).toBe(0.5);
    const drainedAt = Date.now();
    await limiter.acquire(bucket, 1000); // empty again, at the cut
    await sleep(200);
    const during = await limiter.acquire(bucket, 1000);
    const elapsed = Date.now() - drainedAt;
    // At 50/s, not 100/s (the call's own time on the client's clock bounds what it may have seen).
    expect(during.granted).toBeLessThanOrEqual(Math.ceil((elapsed * 50) / 1000) + 1);
    expect(during.granted).toBeGreaterThan(0);
    await sleep(700); // the hold (300 ms) and a quarter second of climbing at 2 a second: whole again
    const [after] = await limiter.inspect('cut');
    expect(after?.rateFactor).toBe(1);
    await limiter.acquire(bucket, 0); // a whole rate's cut is tidied away
    expect(await redis.client.hexists(limiter.keyOf('cut'), 'cut')).toBe(0);
  });

  it('is not made with adaptation off', async () => {
    const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, adaptiveRate: { cut: 1 } });
    const bucket: BucketSpec[] = [{ name: 'nocut', rate: 100, capacity: 10 }];
    await limiter.blockUntil(bucket, 0);
    expect(await redis.client.hexists(limiter.keyOf('nocut'), 'cut')).toBe(0);
  });
});
