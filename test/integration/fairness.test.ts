import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { runBurst } from '../../testkit/burst.ts';

/**
 * Tenant fairness through real Kafka, Redis, provider simulators and consumer processes: tenant A's
 * backlog is published first, then B trickles in behind it, in the same partitions. Fair, B's events are
 * delivered as they come (A's backlog is parked on the deferred topic, out of their way); first come,
 * first served, they wait behind A's backlog until it has drained, after the trickle has ended.
 */
describe('tenant fairness (real Kafka, Redis, simulators, consumer processes)', () => {
  const run = async (fair: boolean) =>
    runBurst({
      kafkaBrokers: inject('kafkaBrokers'),
      redisUrl: inject('redisUrl'),
      events: 2000,
      partitions: 2,
      consumers: 1,
      // A's backlog takes 5 s at the providers' rate; B publishes over the first 2.5 s of it.
      provider: { rate: 200, burst: 100 },
      aqueduct: { rate: 200, burst: 100 },
      limiter: true,
      deadTokenRatio: 0,
      tenants: ['A'],
      trickle: { tenants: ['B'], eventsPerTenant: 100, seconds: 2.5 },
      env: { AQUEDUCT_TENANT_FAIRNESS: String(fair) },
      logDir: await mkdtemp(join(tmpdir(), 'aqueduct-fairness-')),
    });

  /** B's deliveries while it was publishing, as a share of what it published. */
  const servedWhilePublishing = (result: Awaited<ReturnType<typeof run>>) => {
    const phase = result.contendedPhase;
    if (!phase) throw new Error('no contended phase measured');
    const seconds = (phase.toMs - phase.fromMs) / 1000;
    return ((result.tenants.B?.deliveredRate ?? 0) * seconds) / 100;
  };

  it("delivers a small tenant's events as they come while a big tenant's backlog is parked; nothing lost or pushed twice", async () => {
    const result = await run(true);
    expect(result.lost).toBe(0);
    expect(result.duplicates).toBe(0);
    expect(result.provider429).toBe(0);
    expect(result.tenants).toMatchObject({ A: { delivered: 2000 }, B: { delivered: 100 } });
    expect(servedWhilePublishing(result)).toBeGreaterThanOrEqual(0.7);
    // Parked in one lane of the deferred topic per provider: FCM's even partitions, APNs' odd ones.
    expect(result.parkedPartitions).toEqual({ fcm: [0], apns: [1] });
  }, 120_000);

  it('without fairness the same small tenant waits behind the backlog (the test above can fail)', async () => {
    const result = await run(false);
    expect(result.lost).toBe(0);
    expect(result.tenants).toMatchObject({ A: { delivered: 2000 }, B: { delivered: 100 } });
    expect(servedWhilePublishing(result)).toBeLessThan(0.3);
    expect(result.parkedPartitions).toEqual({ fcm: [], apns: [] });
  }, 120_000);
});
