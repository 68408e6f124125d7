import { describe, expect, it } from 'vitest';
import { type PoolBucket, TokenPool, type TokenSource } from '../../src/limiter/token-pool.ts';
import { TenantPools } from '../../src/pipeline/tenant-pools.ts';

/** A limiter that grants everything. */
class GrantingSource implements TokenSource {
  async acquire(_buckets: PoolBucket[], n: number) {
    return { granted: n, waitMs: 0 };
  }
  async blockUntil() {}
  async refund() {}
}

describe('TenantPools: the consumer per-tenant pools, bounded', () => {
  const bucket = (name: string): PoolBucket[] => [{ name, rate: 100, capacity: 100 }];

  it('drops and closes the pools of tenants idle for idleMs, and keeps the busy ones', async () => {
    let now = 1_000_000;
    const source = new GrantingSource();
    const pools = new TenantPools<TokenPool>({ idleMs: 60_000, now: () => now });
    const closed = new Set<TokenPool>();
    class WatchedPool extends TokenPool {
      override async close() {
        closed.add(this);
        await super.close();
      }
    }
    const poolOf = (key: string) =>
      pools.get(key, () => new WatchedPool(source, bucket(key), { chunk: 10, window: 10 }));

    // 1000 tenants seen once: each pool takes a token from the limiter and releases it.
    for (let i = 0; i < 1000; i++) {
      const pool = poolOf(`fcm:tenant:t${i}`);
      expect(await pool.take(1)).toBe(1);
      pool.release(1);
    }
    expect(pools.size).toBe(1000);
    const active = poolOf('fcm:tenant:t0');

    now += 30_000;
    poolOf('fcm:tenant:t0'); // t0 keeps being used
    expect(await pools.sweep()).toBe(0); // nobody idle for a minute yet

    now += 30_000;
    expect(await pools.sweep()).toBe(999);
    expect(pools.size).toBe(1);
    // Each dropped pool was closed (TokenPool.close gives what it holds back to Redis): it serves no more.
    expect(closed.size).toBe(999);
    expect(closed.has(active)).toBe(false);
    for (const pool of closed) expect(await pool.take(1)).toBe(0);
    // The active tenant's pool is the same one, still serving.
    expect(poolOf('fcm:tenant:t0')).toBe(active);
    expect(await active.take(1)).toBe(1);

    // A dropped tenant that comes back gets a fresh pool.
    const again = poolOf('fcm:tenant:t5');
    expect(await again.take(1)).toBe(1);
    expect(pools.size).toBe(2);
  });

  it('keeps a pool whose dry spell ended less than idleMs ago (a partition may wait on it)', async () => {
    let now = 0;
    const closed: string[] = [];
    const pools = new TenantPools({ idleMs: 1000, now: () => now });
    const pool = (key: string, dryUntilMs: number) => ({
      dryUntilMs,
      close: async () => {
        closed.push(key);
      },
    });
    pools.get('dry', () => pool('dry', 1500));
    pools.get('quiet', () => pool('quiet', 0));
    now = 2000;
    expect(await pools.sweep()).toBe(1);
    expect(closed).toEqual(['quiet']);
    now = 2500;
    expect(await pools.sweep()).toBe(1);
    expect(closed).toEqual(['quiet', 'dry']);
  });

  it('sweeps by itself as pools are asked for, and closes all on shutdown', async () => {
    let now = 0;
    let closes = 0;
    const pools = new TenantPools({ idleMs: 1000, now: () => now });
    const make = () => ({
      dryUntilMs: 0,
      close: async () => {
        closes++;
      },
    });
    for (let i = 0; i < 100; i++) pools.get(`t${i}`, make);
    now = 1000;
    pools.get('fresh', make); // idle ones are swept on the way
    await Promise.resolve();
    expect(pools.size).toBe(1);
    expect(closes).toBe(100);
    await pools.closeAll();
    expect(pools.size).toBe(0);
    expect(closes).toBe(101);
  });
});
