import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { type BurstStatus, runBurst } from '../../testkit/burst.ts';

describe('a burst of several tenants (real Kafka, Redis, simulators, consumer processes)', () => {
  it("reports each tenant's deliveries while it runs and at the end", async () => {
    const ticks: BurstStatus[] = [];
    const result = await runBurst({
      kafkaBrokers: inject('kafkaBrokers'),
      redisUrl: inject('redisUrl'),
      events: 600,
      partitions: 2,
      consumers: 1,
      // Slow enough that the drain spans several one-second ticks.
      provider: { rate: 100, burst: 50 },
      aqueduct: { rate: 100, burst: 50 },
      limiter: true,
      deadTokenRatio: 0,
      tenants: ['acme', 'globex'],
      logDir: await mkdtemp(join(tmpdir(), 'aqueduct-demo-tenants-')),
      onTick: (status) => ticks.push(status),
    });
    expect(result.lost).toBe(0);
    expect(result.tenants).toMatchObject({ acme: { delivered: 300 }, globex: { delivered: 300 } });
    // While both were being delivered, the live status named each with its own rate.
    const both = ticks.filter((tick) => tick.tenants.filter((t) => t.deliveredPerSecond > 0).length === 2);
    expect(both.length).toBeGreaterThan(0);
    for (const tick of both) {
      expect(tick.tenants.map((t) => t.tenant)).toEqual(['acme', 'globex']);
      expect(tick.tenants.reduce((sum, t) => sum + t.delivered, 0)).toBe(tick.delivered);
    }
  }, 120_000);
});
