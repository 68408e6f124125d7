import { describe, expect, it } from 'vitest';
import { interleaveByTenant, TenantShares } from '../../src/pipeline/tenant-shares.ts';

/** Feeds `seconds` of steady traffic, 10 ticks a second: demand per tenant and the grants, in events/s. */
function steady(
  shares: TenantShares,
  demand: Record<string, number>,
  granted: number,
  seconds: number,
  start = 1_000_000,
  short = true,
): number {
  let now = start;
  for (let tick = 0; tick < seconds * 10; tick++) {
    now += 100;
    for (const [tenant, perSecond] of Object.entries(demand))
      shares.demanded('fcm', tenant, perSecond / 10, now);
    shares.granted('fcm', granted / 10, now);
    if (short) shares.wentShort('fcm', now);
  }
  return now;
}

describe('TenantShares', () => {
  it('a tenant asking for more than its max-min share is over it; tenants asking less are not', () => {
    const shares = new TenantShares();
    const now = steady(shares, { A: 5000, B: 30, C: 30 }, 800, 10);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(true);
    expect(shares.isOverShare('fcm', 'B', now)).toBe(false);
    expect(shares.isOverShare('fcm', 'C', now)).toBe(false);
  });

  it('a lone tenant asking for more than the whole budget is over its share (its backlog moves out of the way)', () => {
    const shares = new TenantShares();
    const now = steady(shares, { A: 5000 }, 800, 10);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(true);
  });

  it('nobody is over a share while the provider is not short of tokens', () => {
    const shares = new TenantShares();
    const now = steady(shares, { A: 5000, B: 30 }, 800, 10, 1_000_000, false);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(false);
  });

  it('a shortage counts for the horizon only', () => {
    const shares = new TenantShares({ horizonMs: 2000 });
    const now = steady(shares, { A: 5000, B: 30 }, 800, 10);
    expect(shares.isOverShare('fcm', 'A', now + 1999)).toBe(true);
    expect(shares.isOverShare('fcm', 'A', now + 2000)).toBe(false);
  });

  it('two heavy tenants are both over their share; a medium one under the equal split is not', () => {
    const shares = new TenantShares();
    // Budget 900: C asks 250 (< 300), A and B split the remaining 650: 325 each.
    const now = steady(shares, { A: 2000, B: 400, C: 250 }, 900, 10);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(true);
    expect(shares.isOverShare('fcm', 'B', now)).toBe(true);
    expect(shares.isOverShare('fcm', 'C', now)).toBe(false);
  });

  it('weights split the budget in proportion: a heavier tenant may ask more before it is over its share', () => {
    const weighted = new TenantShares({ weights: new Map([['B', 3]]) });
    // Budget 800, A and B both ask 500: unweighted 400 each (both over); B weighted 3 gets 600 (under).
    let now = steady(weighted, { A: 500, B: 500 }, 800, 10);
    expect(weighted.isOverShare('fcm', 'B', now)).toBe(false);
    expect(weighted.isOverShare('fcm', 'A', now)).toBe(true);
    const plain = new TenantShares();
    now = steady(plain, { A: 500, B: 500 }, 800, 10);
    expect(plain.isOverShare('fcm', 'B', now)).toBe(true);
  });

  it('events without a tenant are never over a share, though they count in the demand', () => {
    const shares = new TenantShares();
    const now = steady(shares, { A: 500, '': 5000 }, 800, 10);
    expect(shares.isOverShare('fcm', undefined, now)).toBe(false);
    // Two askers, 400 each: A's 500 is over.
    expect(shares.isOverShare('fcm', 'A', now)).toBe(true);
  });

  it('judges a small tenant against a budget only just measured by the same measure as its demand', () => {
    const shares = new TenantShares({ horizonMs: 2000 });
    const start = 1_000_000;
    // 200 tokens and 2020 events in the first 250 ms: B asks for 20 of what 200 tokens serve.
    shares.granted('fcm', 200, start);
    shares.demanded('fcm', 'B', 20, start + 250);
    shares.demanded('fcm', 'A', 2000, start + 250);
    shares.wentShort('fcm', start + 250);
    expect(shares.isOverShare('fcm', 'B', start + 250)).toBe(false);
    expect(shares.isOverShare('fcm', 'A', start + 250)).toBe(true);
  });

  it("takes no less than half the process's part of the configured rate for its budget, so a first small grant does not park a small tenant", () => {
    const judge = (part: number) => {
      const shares = new TenantShares({ nominalRates: new Map([['fcm', 800]]) });
      shares.fleetShare(part);
      const now = 1_000_000;
      shares.demanded('fcm', 'A', 6000, now);
      shares.demanded('fcm', 'B', 20, now);
      shares.demanded('fcm', 'C', 20, now);
      // The first grant: 40 tokens, 20/s as the rate of the last 2 s.
      shares.granted('fcm', 40, now);
      shares.wentShort('fcm', now);
      return { A: shares.isOverShare('fcm', 'A', now), B: shares.isOverShare('fcm', 'B', now) };
    };
    // A third of the partitions: at least 133/s, and B's 10/s is under a third of it.
    expect(judge(1 / 3)).toEqual({ A: true, B: false });
    // No part of the fleet known to be ours: the first grant is all there is, and B looks over its share.
    expect(judge(0)).toEqual({ A: true, B: true });
  });

  it('a backlog longer than half the horizon at the budget counts as a shortage; a shorter one does not', () => {
    const shares = new TenantShares({ horizonMs: 2000 });
    let now = steady(shares, { A: 1000, B: 30 }, 800, 10, 1_000_000, false);
    shares.backlogged('fcm', 700, now);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(false);
    now += 1;
    shares.backlogged('fcm', 900, now);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(true);
    expect(shares.isOverShare('fcm', 'B', now)).toBe(false);
  });

  it('providers are apart: a shortage of APNs tokens says nothing of FCM', () => {
    const shares = new TenantShares();
    const now = steady(shares, { A: 5000 }, 800, 10, 1_000_000, false);
    shares.wentShort('apns', now);
    expect(shares.isOverShare('fcm', 'A', now)).toBe(false);
  });
});

describe('interleaveByTenant', () => {
  const tenantOf = (entry: string) => (entry.startsWith('-') ? undefined : entry[0]);

  it('alternates tenants, each keeping its own order', () => {
    const out = interleaveByTenant(['A1', 'A2', 'A3', 'A4', 'B1', 'B2'], tenantOf, () => 1);
    expect(out).toEqual(['A1', 'B1', 'A2', 'B2', 'A3', 'A4']);
  });

  it('gives a tenant of weight 2 two places for every one of weight 1', () => {
    const out = interleaveByTenant(['A1', 'A2', 'A3', 'A4', 'B1', 'B2', 'B3', 'B4'], tenantOf, (t) =>
      t === 'A' ? 2 : 1,
    );
    expect(out.slice(0, 6).filter((e) => e.startsWith('A'))).toHaveLength(4);
    expect(out).toHaveLength(8);
    expect(new Set(out).size).toBe(8);
  });

  it('leaves one tenant’s entries as they were', () => {
    const entries = ['A1', 'A2', 'A3'];
    expect(interleaveByTenant(entries, tenantOf, () => 1)).toEqual(entries);
  });
});
