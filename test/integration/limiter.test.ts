import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { toLimiterError } from '../../src/limiter/errors.ts';
import {
  type AcquireResult,
  type BucketSpec,
  LimiterArgumentError,
  LimiterUnavailableError,
  TokenBucketLimiter,
} from '../../src/limiter/index.ts';
import { scriptCall } from '../../src/redis/scripts.ts';
import { LocalRedis } from '../../src/services/index.ts';
import { LimiterModel } from '../helpers/limiter-model.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

let redis: TestRedis;
let prefix: string;
let limiter: TokenBucketLimiter;

beforeAll(() => {
  redis = testRedis('limiter');
  prefix = redis.prefix.slice(0, -1); // the test prefix without its trailing ':'
  limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
});

afterAll(async () => {
  await redis.cleanup();
});

function connections(count: number): Redis[] {
  return Array.from({ length: count }, () => new Redis(inject('redisUrl'), { maxRetriesPerRequest: 3 }));
}

async function redisNowMs(client: Redis): Promise<number> {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

describe('key layout', () => {
  it('puts every bucket of one tag in one hash-tagged key family, fields as documented', async () => {
    const buckets: BucketSpec[] = [
      { name: 'layout', rate: 2, capacity: 10 },
      { name: 'layout:tenant:acme', rate: 0.5, capacity: 3 },
    ];
    await limiter.acquire(buckets, 2);
    expect(limiter.keyOf('layout')).toBe(`${prefix}:{layout}:bucket`);
    expect(limiter.keyOf('layout:tenant:acme')).toBe(`${prefix}:{layout}:bucket:tenant:acme`);
    const global = await redis.client.hgetall(`${prefix}:{layout}:bucket`);
    expect(Object.keys(global).sort()).toEqual(['config', 'tokens', 'ts']);
    expect(global.config).toBe('2 10 60'); // rate, capacity, minTtlSeconds
    expect(Number(global.tokens)).toBe(8);
    const tenant = await redis.client.hgetall(`${prefix}:{layout}:bucket:tenant:acme`);
    expect(Number(tenant.tokens)).toBe(1);
  });

  it('rejects a call whose buckets do not share the hash tag', async () => {
    const error = await limiter
      .acquire(
        [
          { name: 'fcm', rate: 1, capacity: 1 },
          { name: 'apns:tenant:acme', rate: 1, capacity: 1 },
        ],
        1,
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LimiterArgumentError);
    expect((error as LimiterArgumentError).argument).toBe('buckets');
    expect((error as Error).message).toContain('hash tag');
  });
});

describe('acquire', () => {
  it('grants partially and says how long until the rest, across all buckets', async () => {
    const buckets: BucketSpec[] = [
      { name: 'partial', rate: 10, capacity: 5 },
      { name: 'partial:tenant:slow', rate: 0.5, capacity: 3 },
    ];
    const first = await limiter.acquire(buckets, 4);
    expect(first.granted).toBe(3); // the tenant bucket holds only 3
    expect(first.tokensLeft[1]).toBe(0);
    // 1 more token from the tenant bucket at 0.5/s takes 2 s; the provider bucket has 2 already.
    expect(first.waitMs).toBe(2000 + 1);
    const explicit = await limiter.acquire(buckets, 0, { waitFor: 10 });
    // waitFor is clamped to the smallest capacity (3): 3 tokens of the tenant bucket at 0.5/s.
    expect(explicit.waitMs).toBeGreaterThan(5900);
    expect(explicit.waitMs).toBeLessThanOrEqual(6000 + 1);
  });

  it('refills fractional rates exactly over time (0.5/s and 2.5/s)', async () => {
    const run = async (rate: number) => {
      const spec: BucketSpec = { name: `fraction${rate * 10}`, rate, capacity: 5 };
      const drained = await limiter.acquire([spec], 5);
      expect(drained.granted).toBe(5);
      expect(drained.tokensLeft).toEqual([0]);
      const start = drained.serverTimeUs;
      const next = await limiter.acquire([spec], 0, { waitFor: 1 });
      const elapsed = (next.serverTimeUs - start) / 1_000_000;
      expect(Math.abs((next.tokensLeft[0] as number) - rate * elapsed)).toBeLessThanOrEqual(1e-9);
      // the wait for one token from (nearly) empty: 1/rate seconds, to the ms, plus the timer slack
      expect(next.waitMs).toBe(Math.ceil(((1 - (next.tokensLeft[0] as number)) / rate) * 1000) + 1);

      const model = new LimiterModel();
      model.acquire([spec], 5, undefined, start);
      let granted = 0;
      let last: AcquireResult = next;
      model.acquire([spec], 0, 1, next.serverTimeUs);
      // Take every whole token as soon as it is there, for a bit over 4 s of server time.
      while (last.serverTimeUs - start < 4_100_000) {
        await sleep(20);
        last = await limiter.acquire([spec], 5);
        granted += last.granted;
        const expected = model.acquire([spec], 5, undefined, last.serverTimeUs);
        expect(last.granted).toBe(expected.granted);
        expect(
          Math.abs((last.tokensLeft[0] as number) - (expected.tokensLeft[0] as number)),
        ).toBeLessThanOrEqual(1e-9);
        // Nothing lost or invented: everything refilled since the drain is granted or still there.
        const refilled = (rate * (last.serverTimeUs - start)) / 1_000_000;
        expect(Math.abs(granted + (last.tokensLeft[0] as number) - refilled)).toBeLessThanOrEqual(1e-9);
        expect(granted).toBe(Math.floor(refilled + 1e-9));
      }
      return granted;
    };
    const [half, twoAndAHalf] = await Promise.all([run(0.5), run(2.5)]);
    expect(half).toBe(2); // 0.5/s over 4.1 s
    expect(twoAndAHalf).toBe(10); // 2.5/s over 4.1 s
  });

  it('returns levels as decimal text, fractions preserved (not truncated Lua numbers)', async () => {
    const spec: BucketSpec = { name: 'strings', rate: 1000, capacity: 2.75 };
    const result = await limiter.acquire([spec], 2);
    expect(result.tokensLeft[0]).toBeCloseTo(0.75, 9);
    const raw = scriptCall(redis.client, 'acquire');
    const reply = await raw(1, limiter.keyOf('strings'), 0, '', 60, 1000, 2.75, '', 0, 60_000, '');
    expect(typeof reply).toBe('string');
    const fields = (reply as string).split(' ');
    expect(fields).toHaveLength(5);
    expect(Number(fields[4]) % 1).not.toBe(0);
  });
});

describe('prepared arguments', () => {
  it('are reused for the same bucket array only while its specs are unchanged', async () => {
    const config = (name: string) => redis.client.hget(limiter.keyOf(name), 'config');
    const spec: BucketSpec = { name: 'prepared', rate: 2, capacity: 10 };
    const buckets = [spec];
    await limiter.acquire(buckets, 1);
    expect(await config('prepared')).toBe('2 10 60');
    spec.rate = 3;
    await limiter.acquire(buckets, 1);
    expect(await config('prepared')).toBe('3 10 60');
    buckets.push({ name: 'prepared:tenant:t', rate: 1, capacity: 5 });
    expect((await limiter.acquire(buckets, 1)).tokensLeft).toHaveLength(2);
    spec.rate = Number.NaN;
    const error = await limiter.acquire(buckets, 1).catch((e: unknown) => e);
    expect((error as LimiterArgumentError).argument).toBe('rate');
    spec.rate = 3;
    buckets[1] = { name: 'prepared:tenant:t', rate: 1, capacity: 6 };
    await limiter.acquire(buckets, 0);
    expect(await config('prepared:tenant:t')).toBe('1 6 60');
    // More arrays than a limiter keeps prepared, each used once (as the gateway does).
    for (let i = 0; i < 20; i++) await limiter.acquire([{ name: `prepared${i}`, rate: 1, capacity: 1 }], 1);
    expect((await limiter.acquire(buckets, 0)).tokensLeft).toHaveLength(2);
  });
});

describe('acquireMany', () => {
  it('sends the acquires of many buckets in one write: one round trip', async () => {
    await redis.client.ping();
    const stream = (redis.client as unknown as { stream: { write: (...args: unknown[]) => boolean } }).stream;
    const write = stream.write;
    let writes = 0;
    stream.write = function (this: unknown, ...args: unknown[]) {
      writes += 1;
      return write.apply(this, args);
    };
    try {
      const results = await limiter.acquireMany(
        Array.from({ length: 10 }, (_, i) => ({
          buckets: [
            { name: `partition${i}`, rate: 100, capacity: 50 },
            { name: `partition${i}:tenant:t`, rate: 100, capacity: 30 },
          ],
          n: 40,
        })),
      );
      expect(writes).toBe(1);
      expect(results.map((result) => result.granted)).toEqual(Array(10).fill(30));
    } finally {
      stream.write = write;
    }
  });

  it('validates every request before sending any', async () => {
    const error = await limiter
      .acquireMany([
        { buckets: [{ name: 'many-ok', rate: 1, capacity: 1 }], n: 1 },
        { buckets: [{ name: 'many-bad', rate: 1, capacity: 1 }], n: -1 },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LimiterArgumentError);
    expect((error as LimiterArgumentError).argument).toBe('n');
    expect(await redis.client.exists(limiter.keyOf('many-ok'))).toBe(0);
  });
});

describe('block-until', () => {
  it('stops every client of the fleet until the block ends, then grants resume', async () => {
    const clients = connections(4);
    const blocker = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
    const provider: BucketSpec = { name: 'blocked', rate: 2000, capacity: 100 };
    const sets: BucketSpec[][] = [
      [provider],
      [provider],
      [provider, { name: 'blocked:tenant:a', rate: 2000, capacity: 100 }],
      [provider, { name: 'blocked:tenant:b', rate: 2000, capacity: 100 }],
    ];
    const calls: AcquireResult[][] = clients.map(() => []);
    let until = Number.POSITIVE_INFINITY;
    let stop = false;
    try {
      const loops = clients.map(async (client, c) => {
        const instance = new TokenBucketLimiter(client, { keyPrefix: prefix });
        while (!stop) {
          calls[c]?.push(await instance.acquire(sets[c] as BucketSpec[], 5));
          await sleep(2);
        }
      });
      await sleep(100);
      until = await blocker.blockUntil(['blocked'], 500);
      while ((await redisNowMs(redis.client)) < until + 300) await sleep(20);
      stop = true;
      await Promise.all(loops);
    } finally {
      for (const client of clients) client.disconnect();
    }

    for (const clientCalls of calls) {
      // after the block was set (its deadline is server now + 500 ms, rounded up) and before it ends
      const during = clientCalls.filter(
        (r) => r.serverTimeUs / 1000 >= until - 500 && r.serverTimeUs / 1000 < until,
      );
      expect(during.length).toBeGreaterThan(0);
      for (const result of during) {
        expect(result.granted).toBe(0);
        expect(result.blockedUntilMs).toBe(until);
        expect(result.waitMs).toBeGreaterThanOrEqual(until - result.serverTimeUs / 1000);
      }
      for (const result of clientCalls.filter((r) => r.blockedUntilMs !== null))
        expect(result.granted).toBe(0);
      const after = clientCalls.filter((r) => r.serverTimeUs / 1000 >= until);
      expect(after.some((r) => r.granted > 0)).toBe(true);
    }
  });

  it('blocks only the calls that include the blocked bucket, and never shortens a block', async () => {
    const provider: BucketSpec = { name: 'tblock', rate: 1000, capacity: 100 };
    const tenant: BucketSpec = { name: 'tblock:tenant:a', rate: 1000, capacity: 100 };
    const until = await limiter.blockUntil([tenant], 5000);
    expect(await limiter.blockUntil(['tblock:tenant:a'], 10)).toBe(until);
    const withTenant = await limiter.acquire([provider, tenant], 5);
    expect(withTenant.granted).toBe(0);
    expect(withTenant.blockedUntilMs).toBe(until);
    const providerOnly = await limiter.acquire([provider], 5);
    expect(providerOnly.granted).toBe(5);
    expect(providerOnly.blockedUntilMs).toBeNull();
  });

  it('never blocks beyond maxBlockMs, and cuts back a block stored further out', async () => {
    const bounded = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, maxBlockMs: 2000 });
    const spec: BucketSpec = { name: 'bounded-block', rate: 1000, capacity: 100 };
    const nowMs = async () => Number((await redis.client.time())[0]) * 1000;
    for (const huge of [99_999_999_000, 1e15, 2.5e14]) {
      const before = await nowMs();
      const until = await bounded.blockUntil([spec], huge);
      // Redis' TIME in whole seconds here: allow the second it was read in.
      expect(until).toBeLessThanOrEqual(before + 1000 + 2000 + 1);
      expect(until).toBeGreaterThanOrEqual(before + 2000 - 1);
      const blocked = await bounded.acquire([spec], 1);
      expect(blocked.granted).toBe(0);
      expect(blocked.waitMs).toBeLessThanOrEqual(2000 + 2);
    }
    // A deadline far out, as an unbounded version stored it: the next block cuts it back.
    const key = bounded.keyOf(spec.name);
    await redis.client.hset(key, 'blocked_until', '1000000000000000');
    const before = await nowMs();
    expect(await bounded.blockUntil([spec], 10)).toBeLessThanOrEqual(before + 1000 + 2000 + 1);
    // An acquire that meets a block stored further out waits no longer than the bound, and cuts it back.
    await redis.client.hset(key, 'blocked_until', '1000000000000000');
    const frozen = await bounded.acquire([spec], 1);
    expect(frozen.granted).toBe(0);
    expect(frozen.waitMs).toBeLessThanOrEqual(2000 + 2);
    for (let i = 0; i < 100 && Number(await redis.client.hget(key, 'blocked_until')) > 1e14; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(Number(await redis.client.hget(key, 'blocked_until'))).toBeLessThanOrEqual(
      (await nowMs()) + 1000 + 2000 + 1,
    );
    // And the default bound is a minute.
    const until = await limiter.blockUntil(['default-bound'], 1e15);
    expect(until).toBeLessThanOrEqual((await nowMs()) + 1000 + 60_000 + 1);
    expect(() => new TokenBucketLimiter(redis.client, { keyPrefix: prefix, maxBlockMs: 2 ** 31 })).toThrow(
      LimiterArgumentError,
    );
  });
});

describe('refund', () => {
  it('gives tokens back but never above capacity', async () => {
    const spec: BucketSpec = { name: 'refund', rate: 0.001, capacity: 10 };
    const taken = await limiter.acquire([spec], 6);
    expect(taken.tokensLeft[0]).toBeCloseTo(4, 4);
    expect((await limiter.refund([spec], 4)).tokensLeft[0]).toBeCloseTo(8, 4);
    expect((await limiter.refund([spec], 1000)).tokensLeft).toEqual([10]);
    expect((await limiter.refund([{ name: 'refund-new', rate: 1, capacity: 3 }], 5)).tokensLeft).toEqual([3]);
  });
});

describe('TTLs', () => {
  it('sets a TTL on every key written: at least the minimum, 2 × the full refill time, past a block', async () => {
    const pttl = (name: string) => redis.client.pttl(limiter.keyOf(name));
    await limiter.acquire([{ name: 'ttl-fast', rate: 1000, capacity: 10 }], 1);
    expect(await pttl('ttl-fast')).toBeGreaterThan(58_000);
    expect(await pttl('ttl-fast')).toBeLessThanOrEqual(60_000);

    await limiter.acquire([{ name: 'ttl-slow', rate: 0.5, capacity: 100 }], 1); // 2 × 100 / 0.5 = 400 s
    expect(await pttl('ttl-slow')).toBeGreaterThan(398_000);
    expect(await pttl('ttl-slow')).toBeLessThanOrEqual(400_000);

    await limiter.refund([{ name: 'ttl-refund', rate: 1, capacity: 50 }], 1); // 100 s
    expect(await pttl('ttl-refund')).toBeGreaterThan(98_000);
    expect(await pttl('ttl-refund')).toBeLessThanOrEqual(100_000);

    const long = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, maxBlockMs: 180_000 });
    await long.blockUntil(['ttl-block'], 120_000); // a new key holding only the block
    expect(await pttl('ttl-block')).toBeGreaterThan(120_000);
    await limiter.acquire([{ name: 'ttl-block', rate: 1000, capacity: 10 }], 1);
    expect(await pttl('ttl-block')).toBeGreaterThan(120_000);

    const short = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, minTtlSeconds: 5 });
    await short.acquire([{ name: 'ttl-min', rate: 1000, capacity: 10 }], 1);
    expect(await pttl('ttl-min')).toBeGreaterThan(3_000);
    expect(await pttl('ttl-min')).toBeLessThanOrEqual(5_000);
  });
});

describe('TTL renewal', () => {
  it('keeps at least half the TTL on a bucket in use while renewing only once per minTtlSeconds / 2 epoch', async () => {
    const short = new TokenBucketLimiter(redis.client, { keyPrefix: prefix, minTtlSeconds: 2 });
    const key = short.keyOf('renewal');
    await short.acquire([{ name: 'renewal', rate: 1000, capacity: 10 }], 1); // defines the scripts
    const ttls: number[] = [];
    const start = await redisNowMs(redis.client);
    while ((await redisNowMs(redis.client)) < start + 3000) {
      // The script and PTTL in one MULTI: the TTL exactly as the script left it.
      const multi = redis.client.multi();
      (
        multi as unknown as Record<string, (...args: Array<string | number>) => unknown>
      ).aqueductLimiterAcquire?.(1, key, 1, '', 2, 1000, 10, '', 0, 60_000, '');
      multi.pttl(key);
      const replies = await multi.exec();
      ttls.push(Number(replies?.[1]?.[1]));
      await sleep(50);
    }
    expect(Math.min(...ttls)).toBeGreaterThan(1000); // never below ttl / 2
    expect(ttls.some((ttl) => ttl < 1900)).toBe(true); // not renewed on every call…
    expect(ttls.some((ttl, i) => i > 0 && ttl > (ttls[i - 1] as number))).toBe(true); // …but renewed
  });
});

describe('argument errors', () => {
  const ok: BucketSpec = { name: 'args', rate: 1, capacity: 1 };
  const cases: Array<[string, () => Promise<unknown>, string]> = [
    ['rate NaN', () => limiter.acquire([{ ...ok, rate: Number.NaN }], 1), 'rate'],
    ['rate < 0', () => limiter.acquire([{ ...ok, rate: -1 }], 1), 'rate'],
    ['rate 0', () => limiter.acquire([{ ...ok, rate: 0 }], 1), 'rate'],
    ['rate Infinity', () => limiter.acquire([{ ...ok, rate: Number.POSITIVE_INFINITY }], 1), 'rate'],
    ['capacity < 1', () => limiter.acquire([{ ...ok, capacity: 0.5 }], 1), 'capacity'],
    ['capacity NaN', () => limiter.acquire([{ ...ok, capacity: Number.NaN }], 1), 'capacity'],
    ['n < 0', () => limiter.acquire([ok], -1), 'n'],
    ['n fractional', () => limiter.acquire([ok], 1.5), 'n'],
    ['n NaN', () => limiter.acquire([ok], Number.NaN), 'n'],
    ['waitFor < 0', () => limiter.acquire([ok], 1, { waitFor: -1 }), 'waitFor'],
    ['waitFor fractional', () => limiter.acquire([ok], 1, { waitFor: 0.5 }), 'waitFor'],
    ['no buckets', () => limiter.acquire([], 1), 'buckets'],
    ['a bucket twice', () => limiter.acquire([ok, ok], 1), 'buckets'],
    ['name with braces', () => limiter.acquire([{ ...ok, name: '{args}' }], 1), 'name'],
    ['empty name', () => limiter.acquire([{ ...ok, name: '' }], 1), 'name'],
    ['empty tag', () => limiter.acquire([{ ...ok, name: ':x' }], 1), 'name'],
    ['empty rest', () => limiter.acquire([{ ...ok, name: 'args:' }], 1), 'name'],
    ['refund n < 0', () => limiter.refund([ok], -2), 'n'],
    ['refund rate NaN', () => limiter.refund([{ ...ok, rate: Number.NaN }], 1), 'rate'],
    ['block retryAfterMs NaN', () => limiter.blockUntil([ok], Number.NaN), 'retryAfterMs'],
    ['block retryAfterMs < 0', () => limiter.blockUntil(['args'], -5), 'retryAfterMs'],
    ['block across tags', () => limiter.blockUntil(['args', 'other:x'], 5), 'buckets'],
    ['many: bad request', () => limiter.acquireMany([{ buckets: [ok], n: 1, waitFor: -3 }]), 'waitFor'],
    ['acquire priority', () => limiter.acquire([ok], 1, { priority: 'high' as 'low' }), 'priority'],
    [
      'many: bad priority',
      () => limiter.acquireMany([{ buckets: [ok], n: 1, priority: '' as 'low' }]),
      'priority',
    ],
    [
      'keyPrefix with braces',
      async () => new TokenBucketLimiter(redis.client, { keyPrefix: 'a{b}' }),
      'keyPrefix',
    ],
    [
      'minTtlSeconds 0',
      async () => new TokenBucketLimiter(redis.client, { minTtlSeconds: 0 }),
      'minTtlSeconds',
    ],
    [
      'timeoutMs Infinity',
      async () => new TokenBucketLimiter(redis.client, { timeoutMs: Infinity }),
      'timeoutMs',
    ],
  ];
  it.each(cases)('%s: LimiterArgumentError naming the argument', async (_, call, argument) => {
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LimiterArgumentError);
    expect((error as LimiterArgumentError).argument).toBe(argument);
    expect((error as LimiterArgumentError).retriable).toBe(false);
    expect((error as Error).message).toContain(argument);
  });

  // The scripts check everything themselves too (another client may call them directly): each error
  // reply maps to the same typed error, and nothing is written.
  const key = () => limiter.keyOf('rawargs');
  const raw: Array<[string, 'acquire' | 'refund' | 'block', () => Array<string | number>, string]> = [
    ['acquire: no keys', 'acquire', () => [0, 1, '', 60, '', 0, 1, ''], 'buckets'],
    ['acquire: ARGV count', 'acquire', () => [1, key(), 1, '', 60, 1, 1], 'buckets'],
    ['acquire: n < 0', 'acquire', () => [1, key(), -1, '', 60, 1, 1, '', 0, 1, ''], 'n'],
    ['acquire: n fractional', 'acquire', () => [1, key(), 1.5, '', 60, 1, 1, '', 0, 1, ''], 'n'],
    ['acquire: waitFor', 'acquire', () => [1, key(), 1, 'x', 60, 1, 1, '', 0, 1, ''], 'waitFor'],
    ['acquire: minTtlSeconds', 'acquire', () => [1, key(), 1, '', 0, 1, 1, '', 0, 1, ''], 'minTtlSeconds'],
    ['acquire: rate NaN', 'acquire', () => [1, key(), 1, '', 60, 'NaN', 1, '', 0, 1, ''], 'rate'],
    ['acquire: rate inf', 'acquire', () => [1, key(), 1, '', 60, 'inf', 1, '', 0, 1, ''], 'rate'],
    ['acquire: rate < 0', 'acquire', () => [1, key(), 1, '', 60, -2, 1, '', 0, 1, ''], 'rate'],
    ['acquire: capacity < 1', 'acquire', () => [1, key(), 1, '', 60, 1, 0.9, '', 0, 1, ''], 'capacity'],
    ['acquire: capacity NaN', 'acquire', () => [1, key(), 1, '', 60, 1, 'nan', '', 0, 1, ''], 'capacity'],
    ['acquire: held < 0', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', -1, 1, ''], 'held'],
    ['acquire: held fractional', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', 0.5, 1, ''], 'held'],
    ['acquire: leaseMs 0', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', 0, 0, ''], 'leaseMs'],
    ['acquire: no priority', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', 0, 1], 'buckets'],
    ['acquire: priority', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', 0, 1, 'urgent'], 'priority'],
    ['acquire: priority case', 'acquire', () => [1, key(), 1, '', 60, 1, 1, 'p', 0, 1, 'LOW'], 'priority'],
    ['refund: ARGV count', 'refund', () => [1, key(), 1, 60, 1, 1], 'buckets'],
    ['refund: n < 0', 'refund', () => [1, key(), -1, 60, 1, 1, '', 0, 1], 'n'],
    ['refund: capacity', 'refund', () => [1, key(), 1, 60, 1, 0, '', 0, 1], 'capacity'],
    ['refund: held', 'refund', () => [1, key(), 1, 60, 1, 1, 'p', 'x', 1], 'held'],
    ['refund: leaseMs', 'refund', () => [1, key(), 1, 60, 1, 1, 'p', 0, -5], 'leaseMs'],
    ['block: ARGV count', 'block', () => [1, key(), 5, 60, 60_000], 'buckets'],
    ['block: retryAfterMs', 'block', () => [1, key(), 'NaN', 60, 60_000, 1, 0, 1], 'retryAfterMs'],
    ['block: retryAfterMs < 0', 'block', () => [1, key(), -1, 60, 60_000, 1, 0, 1], 'retryAfterMs'],
    ['block: maxBlockMs NaN', 'block', () => [1, key(), 5, 60, 'nan', 1, 0, 1], 'maxBlockMs'],
    ['block: maxBlockMs < 0', 'block', () => [1, key(), 5, 60, -1, 1, 0, 1], 'maxBlockMs'],
    ['block: rateCut 0', 'block', () => [1, key(), 5, 60, 60_000, 0, 0, 1], 'rateCut'],
    ['block: rateCut > 1', 'block', () => [1, key(), 5, 60, 60_000, 1.5, 0, 1], 'rateCut'],
    ['block: holdMs', 'block', () => [1, key(), 5, 60, 60_000, 0.5, -1, 1], 'holdMs'],
    [
      'block: recoveryPerSecond',
      'block',
      () => [1, key(), 5, 60, 60_000, 0.5, 0, 'inf'],
      'recoveryPerSecond',
    ],
  ];
  it.each(raw)(
    '%s: the script replies with an error mapped to LimiterArgumentError',
    async (_, script, args, argument) => {
      const error = await scriptCall(redis.client, script)(...args()).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      const mapped = toLimiterError(error, 'acquire');
      expect(mapped).toBeInstanceOf(LimiterArgumentError);
      expect((mapped as LimiterArgumentError).argument).toBe(argument);
      expect(await redis.client.exists(key())).toBe(0);
    },
  );
});

describe('acquire.lua and the stored config', () => {
  it('parses the stored config texts without checking them again, but checks any other text and writes nothing then', async () => {
    const key = limiter.keyOf('trusted');
    const raw = scriptCall(redis.client, 'acquire');
    expect(String(await raw(1, key, 1, '', 60, '2', '10', '', 0, 60_000, '')).split(' ')[0]).toBe('1');
    expect(await redis.client.hget(key, 'config')).toBe('2 10 60');
    const before = await redis.client.hgetall(key);
    for (const [rate, capacity, argument] of [
      ['2x', '10', 'rate'],
      ['2', '10x', 'capacity'],
      ['-2', '10', 'rate'],
      ['2', '0.5', 'capacity'],
    ] as const) {
      const error = await raw(1, key, 1, '', 60, rate, capacity, '', 0, 60_000, '').catch((e: unknown) => e);
      const mapped = toLimiterError(error, 'acquire');
      expect(mapped).toBeInstanceOf(LimiterArgumentError);
      expect((mapped as LimiterArgumentError).argument).toBe(argument);
    }
    expect(await redis.client.hgetall(key)).toEqual(before);
    // The same rate written differently is a new config: checked, stored, and the TTL renewed.
    await raw(1, key, 0, '', 60, '2.0', '10', '', 0, 60_000, '');
    expect(await redis.client.hget(key, 'config')).toBe('2.0 10 60');
  });
});

describe('with a Redis of its own (flush, outage, pause)', () => {
  let local: LocalRedis;
  let admin: Redis;

  beforeAll(async () => {
    local = await LocalRedis.start();
    admin = new Redis(local.url, { maxRetriesPerRequest: 1 });
    admin.on('error', () => {}); // it reconnects through the outage test
  });

  afterAll(async () => {
    admin.disconnect();
    await local.dispose();
  });

  it('survives SCRIPT FLUSH mid-run: ioredis reloads the scripts and no call fails', async () => {
    const clients = Array.from({ length: 3 }, () => new Redis(local.url, { maxRetriesPerRequest: 1 }));
    const spec: BucketSpec = { name: 'flush', rate: 1_000_000, capacity: 1_000_000 };
    const errors: unknown[] = [];
    const results: AcquireResult[] = [];
    let stop = false;
    try {
      const loops = clients.map(async (client, c) => {
        const instance = new TokenBucketLimiter(client);
        while (!stop) {
          try {
            if (c === 0)
              results.push(
                ...(await instance.acquireMany([
                  { buckets: [spec], n: 3 },
                  { buckets: [spec], n: 4 },
                ])),
              );
            else results.push(await instance.acquire([spec], 10));
          } catch (error) {
            errors.push(error);
          }
          await sleep(1);
        }
      });
      await sleep(150);
      await admin.config('RESETSTAT');
      const flushedAt = await redisNowMs(admin);
      await admin.script('FLUSH');
      await sleep(150);
      stop = true;
      await Promise.all(loops);

      expect(errors).toEqual([]);
      expect(results.filter((r) => r.serverTimeUs / 1000 > flushedAt + 20).length).toBeGreaterThan(0);
      expect(results.every((r) => r.failedOpen === false)).toBe(true);
      const errorstats = String(await admin.info('errorstats'));
      // EVALSHAs did hit the empty script cache (so the reload path really ran)…
      expect(Number(/errorstat_NOSCRIPT:count=(\d+)/.exec(errorstats)?.[1] ?? 0)).toBeGreaterThan(0);
      // …and were answered by re-sending the script as EVAL.
      const commandstats = String(await admin.info('commandstats'));
      expect(Number(/cmdstat_eval:calls=(\d+)/.exec(commandstats)?.[1] ?? 0)).toBeGreaterThan(0);
    } finally {
      for (const client of clients) client.disconnect();
    }
  });

  it('fails closed with a retriable error, or open with a full grant, while Redis is down; recovers after', async () => {
    const client = new Redis(local.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    client.on('error', () => {});
    const failedOpen: LimiterUnavailableError[] = [];
    const closed = new TokenBucketLimiter(client, { keyPrefix: 'outage', timeoutMs: 500 });
    const open = new TokenBucketLimiter(client, {
      keyPrefix: 'outage',
      failurePolicy: 'open',
      timeoutMs: 500,
      onFailOpen: (error) => failedOpen.push(error),
    });
    const spec: BucketSpec = { name: 'outage', rate: 1, capacity: 10 };
    try {
      expect((await closed.acquire([spec], 8)).granted).toBe(8);
      await local.stop();

      const error = await closed.acquire([spec], 1).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LimiterUnavailableError);
      expect((error as LimiterUnavailableError).retriable).toBe(true);
      expect((error as LimiterUnavailableError).operation).toBe('acquire');

      const granted = await open.acquire([spec], 7);
      expect(granted).toMatchObject({ granted: 7, waitMs: 0, failedOpen: true, blockedUntilMs: null });
      const many = await open.acquireMany([
        { buckets: [spec], n: 2 },
        { buckets: [spec], n: 3 },
      ]);
      expect(many.map((r) => [r.granted, r.failedOpen])).toEqual([
        [2, true],
        [3, true],
      ]);
      expect(failedOpen.length).toBe(3);
      expect(failedOpen.every((e) => e instanceof LimiterUnavailableError)).toBe(true);
      // Only acquire fails open; a refund that cannot reach Redis says so.
      expect(await open.refund([spec], 1).catch((e: unknown) => e)).toBeInstanceOf(LimiterUnavailableError);

      await local.restart();
      let after: AcquireResult | undefined;
      for (let attempt = 0; attempt < 100 && !after; attempt++) {
        after = await closed.acquire([spec], 4).catch(async () => {
          await sleep(100);
          return undefined;
        });
      }
      // A restarted Redis without persistence is empty: the bucket starts full again, and the scripts
      // were loaded on the new connection without anyone asking.
      expect(after?.granted).toBe(4);
      expect(after?.tokensLeft).toEqual([6]);
    } finally {
      client.disconnect();
    }
  });

  it('turns a Redis that does not answer in time into LimiterUnavailableError', async () => {
    const client = new Redis(local.url, { maxRetriesPerRequest: 1 });
    const impatient = new TokenBucketLimiter(client, { timeoutMs: 100 });
    const spec: BucketSpec = { name: 'slow', rate: 10, capacity: 10 };
    try {
      await impatient.acquire([spec], 1);
      await admin.call('CLIENT', 'PAUSE', '500', 'ALL');
      const error = await impatient.acquire([spec], 1).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LimiterUnavailableError);
      expect((error as Error).message).toContain('no reply within 100 ms');
    } finally {
      client.disconnect();
    }
  });
});
