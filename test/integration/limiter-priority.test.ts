import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BucketSpec, TokenBucketLimiter } from '../../src/limiter/index.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

// Low-priority acquires (the read-back of tenants' parked events) cannot take the reserve kept for the
// normal class, sized from what normal calls are granted: lua/acquire.lua and the normal_rate field of
// lua/includes/provider-bucket.lua, against a real Redis.

let redis: TestRedis;
let limiter: TokenBucketLimiter;

beforeAll(() => {
  redis = testRedis('limiter-priority');
  // No timer slack: the waits below are compared with the script's own arithmetic.
  limiter = new TokenBucketLimiter(redis.client, { keyPrefix: redis.prefix.slice(0, -1), timerSlackMs: 0 });
});

afterAll(async () => {
  await redis.cleanup();
});

/**
 * The reserve a low-priority call at `nowUs` had to leave, from the normal_rate field as it was before
 * the call: a quarter second of the normal class's granted rate, decayed with a time constant of 1 s,
 * at most half the capacity.
 */
function reserveOf(field: string | null, nowUs: number, capacity: number): number {
  if (field === null) return 0;
  const [rate, at] = field.split(' ').map(Number) as [number, number];
  const decayed = nowUs > at ? rate * Math.exp((at - nowUs) / 1_000_000) : rate;
  return Math.min(capacity / 2, decayed * 0.25);
}

async function redisNowUs(): Promise<number> {
  const [seconds, micros] = await redis.client.time();
  return Number(seconds) * 1_000_000 + Number(micros);
}

describe('the reserve', () => {
  it('is kept from a low-priority call while normal calls are granted tokens, and a normal call takes it', async () => {
    const bucket: BucketSpec[] = [{ name: 'reserve', rate: 1, capacity: 1000 }];
    const key = limiter.keyOf('reserve');
    // A normal call alone does not track its class's rate: nothing is written beside the level.
    expect((await limiter.acquire(bucket, 100)).granted).toBe(100);
    expect(await redis.client.hexists(key, 'normal_rate')).toBe(0);
    // A low-priority call marks the low class present (the field, at rate 0); from then on every
    // normal grant counts.
    expect((await limiter.acquire(bucket, 0, { priority: 'low' })).granted).toBe(0);
    expect(await redis.client.hget(key, 'normal_rate')).toMatch(/^0 \d+ \d+$/);
    expect((await limiter.acquire(bucket, 400)).granted).toBe(400);
    const field = await redis.client.hget(key, 'normal_rate');
    expect(field).toMatch(/^400 \d+ \d+$/);

    const low = await limiter.acquire(bucket, 600, { priority: 'low' });
    const reserve = reserveOf(field, low.serverTimeUs, 1000);
    expect(reserve).toBeGreaterThan(1);
    // Every whole token above the reserve, and not one of the reserve.
    const left = low.tokensLeft[0] as number;
    expect(low.granted).toBeGreaterThan(0);
    expect(low.granted).toBeLessThan(600);
    expect(left - reserve).toBeGreaterThanOrEqual(-1e-9);
    expect(left - reserve).toBeLessThan(1);
    // A normal call takes it (and what has refilled since).
    expect((await limiter.acquire(bucket, 600)).granted).toBeGreaterThanOrEqual(Math.floor(left));
  });

  it('is 0 without normal grants: a low-priority call then gets the whole level', async () => {
    // No field at all (no normal call was ever counted).
    const fresh: BucketSpec[] = [{ name: 'alone', rate: 1, capacity: 1000 }];
    expect((await limiter.acquire(fresh, 1000, { priority: 'low' })).granted).toBe(1000);
    // The low class alone keeps the field at rate 0.
    const key = limiter.keyOf('alone');
    expect(await redis.client.hget(key, 'normal_rate')).toMatch(/^0 \d+ \d+$/);
    // A normal rate that has decayed away (the last normal grant a minute ago).
    const decayed: BucketSpec[] = [{ name: 'decayed', rate: 1, capacity: 1000 }];
    await limiter.acquire(decayed, 0);
    const now = await redisNowUs();
    await redis.client.hset(limiter.keyOf('decayed'), 'normal_rate', `1000 ${now - 60_000_000} ${now}`);
    expect((await limiter.acquire(decayed, 1000, { priority: 'low' })).granted).toBe(1000);
  });

  it('is at most half the capacity', async () => {
    const bucket: BucketSpec[] = [{ name: 'half', rate: 1, capacity: 100 }];
    await limiter.acquire(bucket, 0);
    const now = await redisNowUs();
    await redis.client.hset(limiter.keyOf('half'), 'normal_rate', `100000 ${now} ${now}`);
    const low = await limiter.acquire(bucket, 100, { priority: 'low' });
    expect(low.granted).toBe(50);
  });

  it('is told to a low-priority caller: its wait brings the level to the reserve plus what it waits for', async () => {
    const rate = 100;
    const bucket: BucketSpec[] = [{ name: 'lowwait', rate, capacity: 1000 }];
    const key = limiter.keyOf('lowwait');
    await limiter.acquire(bucket, 0, { priority: 'low' });
    expect((await limiter.acquire(bucket, 400)).granted).toBe(400);
    const field = await redis.client.hget(key, 'normal_rate');
    const low = await limiter.acquire(bucket, 1000, { priority: 'low', waitFor: 50 });
    const reserve = reserveOf(field, low.serverTimeUs, 1000);
    const left = low.tokensLeft[0] as number;
    // waitMs is rounded up to whole ms: the level reaches reserve + 50 by then, and not a ms earlier.
    expect(left + (low.waitMs / 1000) * rate).toBeGreaterThanOrEqual(reserve + 50 - 1e-9);
    expect(left + ((low.waitMs - 1) / 1000) * rate).toBeLessThan(reserve + 50);
    // A normal caller is told the wait for its tokens alone.
    const normal = await limiter.acquire(bucket, 0, { waitFor: 400 });
    const normalLeft = normal.tokensLeft[0] as number;
    expect(normalLeft + (normal.waitMs / 1000) * rate).toBeGreaterThanOrEqual(400 - 1e-9);
    expect(normalLeft + ((normal.waitMs - 1) / 1000) * rate).toBeLessThan(400);
  });

  it('reaches acquireMany', async () => {
    const bucket: BucketSpec[] = [{ name: 'many', rate: 1, capacity: 10 }];
    await limiter.acquireMany([{ buckets: bucket, n: 1, priority: 'low' }]);
    expect(await redis.client.hget(limiter.keyOf('many'), 'normal_rate')).toMatch(/^0 \d+ \d+$/);
  });
});

describe('the normal_rate field', () => {
  it('counts normal grants only, decayed, and notes when a low-priority call came', async () => {
    const bucket: BucketSpec[] = [{ name: 'field', rate: 1, capacity: 1000 }];
    const key = limiter.keyOf('field');
    await limiter.acquire(bucket, 0, { priority: 'low' });
    const first = await limiter.acquire(bucket, 200);
    const [, at] = ((await redis.client.hget(key, 'normal_rate')) as string).split(' ');
    expect(Number(at)).toBe(first.serverTimeUs);
    // A low grant leaves the rate and its time as they were, and notes itself.
    const low = await limiter.acquire(bucket, 10, { priority: 'low' });
    expect(low.granted).toBe(10);
    expect(await redis.client.hget(key, 'normal_rate')).toBe(`200 ${at} ${low.serverTimeUs}`);
    // A normal grant adds to the decayed rate.
    const second = await limiter.acquire(bucket, 100);
    const [rate, at2, seen] = ((await redis.client.hget(key, 'normal_rate')) as string).split(' ');
    const expected = 200 * Math.exp((Number(at) - second.serverTimeUs) / 1_000_000) + 100;
    expect(Number(rate)).toBeCloseTo(expected, 2);
    expect(Number(at2)).toBe(second.serverTimeUs);
    expect(Number(seen)).toBe(low.serverTimeUs);
  });

  it('goes once no low-priority call has come for 10 s, or when it does not parse', async () => {
    const bucket: BucketSpec[] = [{ name: 'quiet', rate: 1, capacity: 1000 }];
    const key = limiter.keyOf('quiet');
    await limiter.acquire(bucket, 0);
    const now = await redisNowUs();
    await redis.client.hset(key, 'normal_rate', `50 ${now} ${now - 11_000_000}`);
    await limiter.acquire(bucket, 1);
    expect(await redis.client.hexists(key, 'normal_rate')).toBe(0);
    await redis.client.hset(key, 'normal_rate', 'garbage');
    await limiter.acquire(bucket, 0);
    expect(await redis.client.hexists(key, 'normal_rate')).toBe(0);
    // A low call replaces one that does not parse.
    await redis.client.hset(key, 'normal_rate', 'garbage');
    expect((await limiter.acquire(bucket, 5, { priority: 'low' })).granted).toBe(5);
    expect(await redis.client.hget(key, 'normal_rate')).toMatch(/^0 \d+ \d+$/);
  });
});

describe('turns across the classes', () => {
  it("a normal caller's wait is not pushed back by a low caller's promise; a low caller's is by every promise", async () => {
    const rate = 10;
    const bucket: BucketSpec[] = [{ name: 'classes', rate, capacity: 100 }];
    const key = limiter.keyOf('classes');
    await limiter.acquire(bucket, 100); // empty
    const parked = await limiter.acquire(bucket, 50, { holder: 'parked', waitFor: 50, priority: 'low' });
    expect(parked.granted).toBeLessThan(50);
    expect(await redis.client.hget(key, 'promised:parked')).toMatch(/^\d+ low$/);

    // The small tenant's pool is told the plain wait for its tokens, not one after the parked turn.
    const small = await limiter.acquire(bucket, 5, { holder: 'small', waitFor: 5 });
    const left = small.tokensLeft[0] as number;
    expect(small.granted).toBeLessThan(5);
    expect(left + (small.waitMs / 1000) * rate).toBeGreaterThanOrEqual(5 - 1e-9);
    expect(left + ((small.waitMs - 1) / 1000) * rate).toBeLessThan(5);
    expect(small.waitMs).toBeLessThan(parked.waitMs);
    expect(await redis.client.hget(key, 'promised:small')).toMatch(/^\d+$/);

    // Another normal pool still waits for the normal turn before it (0.5 s of refill, then its own).
    const other = await limiter.acquire(bucket, 5, { holder: 'other', waitFor: 5 });
    expect(other.waitMs).toBeGreaterThan(small.waitMs);
    expect(other.waitMs).toBeLessThan(parked.waitMs);
    // Another low pool waits for every turn before it, the parked one's included.
    const parked2 = await limiter.acquire(bucket, 50, { holder: 'parked2', waitFor: 50, priority: 'low' });
    expect(parked2.waitMs).toBeGreaterThan(parked.waitMs);
  });
});
