import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type AcquireResult, type BucketSpec, TokenBucketLimiter } from '../../src/limiter/index.ts';
import { LimiterModel } from '../helpers/limiter-model.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

// Property tests against the real Redis, checked against the plain TypeScript model in
// test/helpers/limiter-model.ts. The scripts return the Redis server time of every decision, so the
// calls of many concurrent clients can be replayed through the model in the order Redis ran them.

const CLIENTS = 6;
const SLACK = 1; // the limiter's default timerSlackMs

let redis: TestRedis;
let connections: Redis[];
let runs = 0;

beforeAll(() => {
  redis = testRedis('limiter-prop');
  connections = Array.from(
    { length: CLIENTS },
    () => new Redis(inject('redisUrl'), { maxRetriesPerRequest: 3 }),
  );
});

afterAll(async () => {
  for (const connection of connections) connection.disconnect();
  await redis.cleanup();
});

/** A fresh key prefix per property run, so every run starts from empty (full) buckets. */
function runPrefix(): string {
  runs += 1;
  return `${redis.prefix}run${runs}`;
}

interface Call {
  buckets: BucketSpec[];
  n: number;
  waitFor: number | undefined;
  result: AcquireResult;
}

/** Orders calls as Redis ran them: by server time, and within one microsecond by the shared bucket's level. */
function inServerOrder(calls: Call[]): Call[] {
  return [...calls].sort(
    (a, b) =>
      a.result.serverTimeUs - b.result.serverTimeUs ||
      (b.result.tokensLeft[0] as number) - (a.result.tokensLeft[0] as number),
  );
}

function expectMatchesModel(model: LimiterModel, call: Call): void {
  const expected = model.acquire(call.buckets, call.n, call.waitFor, call.result.serverTimeUs);
  const context = JSON.stringify({ call: { ...call, result: undefined }, expected, actual: call.result });
  expect(call.result.granted, context).toBe(expected.granted);
  expect(call.result.waitMs, context).toBe(expected.waitMs > 0 ? expected.waitMs + SLACK : 0);
  expect(call.result.blockedUntilMs, context).toBe(expected.blockedUntilMs);
  call.result.tokensLeft.forEach((left, i) => {
    expect(Math.abs(left - (expected.tokensLeft[i] as number)), context).toBeLessThanOrEqual(1e-9);
  });
}

/** In every window [t_i, t_j] of server time: tokens granted <= capacity + rate * (t_j - t_i) + 1. */
function expectWindowBound(spec: BucketSpec, calls: Call[]): void {
  const grants = calls
    .filter((call) => call.buckets.some((bucket) => bucket.name === spec.name))
    .map((call) => ({ t: call.result.serverTimeUs, g: call.result.granted }));
  for (let i = 0; i < grants.length; i++) {
    let sum = 0;
    for (let j = i; j < grants.length; j++) {
      const grant = grants[j] as { t: number; g: number };
      sum += grant.g;
      const seconds = (grant.t - (grants[i] as { t: number }).t) / 1_000_000;
      const bound = spec.capacity + spec.rate * seconds + 1;
      if (sum > bound) {
        expect.fail(
          `${spec.name}: ${sum} tokens granted in ${seconds} s, bound ${bound} (${JSON.stringify(spec)})`,
        );
      }
    }
  }
}

async function expectEveryKeyHasTtl(prefix: string): Promise<void> {
  let cursor = '0';
  let count = 0;
  do {
    const [next, keys] = await redis.client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
    cursor = next;
    for (const key of keys) {
      count += 1;
      expect(await redis.client.pttl(key), key).toBeGreaterThan(0);
    }
  } while (cursor !== '0');
  expect(count).toBeGreaterThan(0);
}

const rateArb = fc.double({ min: 1, max: 500, noNaN: true, noDefaultInfinity: true });
const capacityArb = fc.oneof(
  fc.integer({ min: 1, max: 60 }),
  fc.double({ min: 1, max: 60, noNaN: true, noDefaultInfinity: true }),
);
const opArb = fc.record({
  n: fc.integer({ min: 0, max: 80 }),
  waitFor: fc.option(fc.integer({ min: 0, max: 80 }), { nil: undefined }),
  /** 0: the provider bucket alone; 1 or 2: the provider bucket and one tenant's bucket. */
  set: fc.integer({ min: 0, max: 2 }),
  pauseMs: fc.integer({ min: 0, max: 12 }),
  /** Sleep the returned wait (capped) instead of the pause: the polite client. */
  sleepWait: fc.boolean(),
});

describe('the limiter against its reference model (property-based, real Redis)', () => {
  it('many concurrent clients: grants, waits and levels match the model, and no window exceeds capacity + rate·t + 1', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          provider: fc.record({ rate: rateArb, capacity: capacityArb }),
          tenants: fc.tuple(
            fc.record({ rate: rateArb, capacity: capacityArb }),
            fc.record({ rate: rateArb, capacity: capacityArb }),
          ),
          clients: fc.array(fc.array(opArb, { minLength: 3, maxLength: 15 }), {
            minLength: 2,
            maxLength: CLIENTS,
          }),
        }),
        async ({ provider, tenants, clients }) => {
          const prefix = runPrefix();
          const global: BucketSpec = { name: 'fcm', ...provider };
          const sets: BucketSpec[][] = [
            [global],
            [global, { name: 'fcm:tenant:a', ...tenants[0] }],
            [global, { name: 'fcm:tenant:b', ...tenants[1] }],
          ];
          const calls: Call[] = [];
          await Promise.all(
            clients.map(async (ops, c) => {
              const limiter = new TokenBucketLimiter(connections[c] as Redis, { keyPrefix: prefix });
              for (const op of ops) {
                const buckets = sets[op.set] as BucketSpec[];
                const options = op.waitFor === undefined ? {} : { waitFor: op.waitFor };
                const result = await limiter.acquire(buckets, op.n, options);
                calls.push({ buckets, n: op.n, waitFor: op.waitFor, result });
                await sleep(op.sleepWait ? Math.min(result.waitMs, 30) : op.pauseMs);
              }
            }),
          );

          const ordered = inServerOrder(calls);
          const model = new LimiterModel();
          for (const call of ordered) expectMatchesModel(model, call);
          for (const spec of [global, sets[1]?.[1], sets[2]?.[1]])
            expectWindowBound(spec as BucketSpec, ordered);
          await expectEveryKeyHasTtl(prefix);
        },
      ),
      { numRuns: 12 },
    );
  });

  it('a lone client that sleeps the returned waitMs then gets what it was told it would (blocks included)', async () => {
    // The model knows blocks, not the rate cut that comes with them (tested on its own in limiter.test.ts).
    const limiter = () =>
      new TokenBucketLimiter(redis.client, { keyPrefix: runPrefix(), adaptiveRate: { cut: 1 } });
    await fc.assert(
      fc.asyncProperty(
        // Capacities of at most rate/4 keep every real wait under about 250 ms.
        fc
          .tuple(
            fc.double({ min: 4, max: 400, noNaN: true, noDefaultInfinity: true }),
            fc.double({ min: 4, max: 400, noNaN: true, noDefaultInfinity: true }),
          )
          .chain(([rate, tenantRate]) =>
            fc.record({
              provider: fc.constant(rate),
              tenant: fc.constant(tenantRate),
              capacity: fc.integer({ min: 1, max: Math.max(1, Math.floor(rate / 4)) }),
              tenantCapacity: fc.integer({ min: 1, max: Math.max(1, Math.floor(tenantRate / 4)) }),
              steps: fc.array(
                fc.record({
                  n: fc.integer({ min: 0, max: 120 }),
                  waitFor: fc.option(fc.integer({ min: 0, max: 120 }), { nil: undefined }),
                  blockMs: fc.option(fc.integer({ min: 1, max: 150 }), { nil: undefined }),
                }),
                { minLength: 1, maxLength: 3 },
              ),
            }),
          ),
        async ({ provider, tenant, capacity, tenantCapacity, steps }) => {
          const lone = limiter();
          const buckets: BucketSpec[] = [
            { name: 'apns', rate: provider, capacity },
            { name: 'apns:tenant:x', rate: tenant, capacity: tenantCapacity },
          ];
          const model = new LimiterModel();
          for (const step of steps) {
            if (step.blockMs !== undefined) {
              model.block('apns', await lone.blockUntil(['apns'], step.blockMs));
            }
            const options = step.waitFor === undefined ? {} : { waitFor: step.waitFor };
            const told = await lone.acquire(buckets, step.n, options);
            expectMatchesModel(model, { buckets, n: step.n, waitFor: step.waitFor, result: told });
            const want = Math.min(step.waitFor ?? step.n - told.granted, capacity, tenantCapacity);
            if (want === 0) {
              expect(told.waitMs).toBe(0);
              continue;
            }
            await sleep(told.waitMs);
            const served = await lone.acquire(buckets, want);
            expectMatchesModel(model, { buckets, n: want, waitFor: undefined, result: served });
            expect(served.granted, JSON.stringify({ told, served })).toBe(want);
          }
        },
      ),
      { numRuns: 10 },
    );
  });

  it('refunds never lift a bucket above its capacity', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({ rate: rateArb, capacity: capacityArb, tenantCapacity: capacityArb }),
        fc.array(
          fc.record({
            refund: fc.boolean(),
            n: fc.integer({ min: 0, max: 200 }),
            pauseMs: fc.integer({ min: 0, max: 5 }),
          }),
          { minLength: 1, maxLength: 20 },
        ),
        async ({ rate, capacity, tenantCapacity }, ops) => {
          const limiter = new TokenBucketLimiter(redis.client, { keyPrefix: runPrefix() });
          const buckets: BucketSpec[] = [
            { name: 'fcm', rate, capacity },
            { name: 'fcm:tenant:r', rate: rate / 2, capacity: tenantCapacity },
          ];
          const model = new LimiterModel();
          for (const op of ops) {
            if (op.refund) {
              const refunded = await limiter.refund(buckets, op.n);
              const expected = model.refund(buckets, op.n, refunded.serverTimeUs);
              expect(refunded.tokensLeft[0]).toBeLessThanOrEqual(capacity);
              expect(refunded.tokensLeft[1]).toBeLessThanOrEqual(tenantCapacity);
              refunded.tokensLeft.forEach((left, i) => {
                expect(Math.abs(left - (expected[i] as number))).toBeLessThanOrEqual(1e-9);
              });
            } else {
              const result = await limiter.acquire(buckets, op.n);
              expectMatchesModel(model, { buckets, n: op.n, waitFor: undefined, result });
              expect(result.tokensLeft[0]).toBeLessThanOrEqual(capacity);
              expect(result.tokensLeft[1]).toBeLessThanOrEqual(tenantCapacity);
            }
            await sleep(op.pauseMs);
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});
