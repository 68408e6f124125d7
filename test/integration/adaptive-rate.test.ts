import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { TokenBucketLimiter } from '../../src/limiter/index.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

/** Aqueduct's configured limits, as the provider publishes them. */
const CONFIGURED = { rate: 200, burst: 200 };
/** The provider turns out slower: 90 % of the configured rate. */
const SLOW_RATE = 180;
const EVENTS = 7000;

async function bucketOf(rig: Rig, name: 'fcm' | 'apns') {
  const [bucket] = await new TokenBucketLimiter(rig.redis, { keyPrefix: 'aqueduct' }).inspect(name);
  return bucket;
}

/** Publishes `events` and starts two consumers against simulators at SLOW_RATE, Aqueduct at CONFIGURED. */
async function startSlowProvider(events: readonly NotificationEventInput[]) {
  const started = await startRig({
    partitions: 4,
    ...CONFIGURED,
    simulator: { rate: SLOW_RATE, burst: CONFIGURED.burst },
    // Small chunks, so that the delivered rate over a few seconds is smooth enough to read.
    env: { AQUEDUCT_ACQUIRE_CHUNK: '20' },
  });
  await publishEvents(started.kafka, events, { topic: started.topic });
  await Promise.all([started.startConsumer('a'), started.startConsumer('b')]);
  return started;
}

/**
 * Waits for the provider's first 429 for the sender's rate (once its slower refill has fallen behind),
 * then 12 s, and expects none of them later than 5 s after the first.
 */
async function expectSenderThrottlesToStop(throttles: () => ReadonlyArray<{ atMs: number }>): Promise<void> {
  await expect.poll(() => throttles().length, { timeout: 60_000, interval: 100 }).toBeGreaterThan(0);
  const first = throttles()[0]?.atMs as number;
  await sleep(Math.max(0, first + 12_000 - Date.now()));
  const late = throttles().filter((t) => t.atMs > first + 5000);
  expect(late, `429s more than 5 s after the first (at ${new Date(first).toISOString()})`).toEqual([]);
}

describe('a provider slower than configured (real Kafka, Redis, simulator, consumer processes, default adaptation)', () => {
  it('is found out: its 429s stop within 5 s of the first, and the rate climbs back to the configured one once the provider recovers', async () => {
    const events = [...generateEvents({ count: EVENTS, apnsRatio: 0, deadTokenRatio: 0 })];
    rig = await startSlowProvider(events);
    const fcm = rig.simulators.fcm;
    const projectThrottles = () => fcm.throttles().filter((t) => t.scope === 'provider');

    // Down: found out from its 429s, and the rate cut.
    await expectSenderThrottlesToStop(projectThrottles);
    expect((await bucketOf(rig, 'fcm'))?.rateFactor).toBeLessThan(1);
    const during = projectThrottles().length;

    // Up: the provider recovers (here beyond the configured rate); the rate climbs back to the
    // configured one, never above it.
    fcm.setLimits({ rate: 2 * CONFIGURED.rate });
    await expect
      .poll(async () => (await bucketOf(rig as Rig, 'fcm'))?.rateFactor, { timeout: 60_000, interval: 500 })
      .toBe(1);
    const from = Date.now();
    await sleep(5000);
    const to = Date.now();
    const delivered = fcm.records().filter((r) => r.arrivedAtMs >= from && r.arrivedAtMs < to).length;
    const rate = delivered / ((to - from) / 1000);
    console.log(
      `429s: ${during}, all within ${((projectThrottles().at(-1)?.atMs as number) - (projectThrottles()[0]?.atMs as number)) / 1000} s of the first; back at the configured rate: ${rate.toFixed(1)}/s delivered`,
    );
    expect(rate).toBeGreaterThan(0.9 * CONFIGURED.rate);
    expect(rate).toBeLessThanOrEqual(CONFIGURED.rate + CONFIGURED.burst / 5);
    expect(projectThrottles()).toHaveLength(during);

    // Nothing lost, nothing pushed twice: the throttled sends were retried.
    const ledger = await rig.settle(
      events.map((e) => e.id as string),
      120_000,
    );
    expect(ledger.delivered.size).toBe(EVENTS);
    expect(ledger.acceptedTotal).toBe(EVENTS);
    expect(ledger.deadLettered).toEqual([]);
  }, 240_000);
});

describe('an APNs endpoint slower than configured that throttles the sender with TooManyRequests (real Kafka, Redis, simulator, consumer processes)', () => {
  it("reads the 429s of devices' first pushes as the sender's: they stop within 5 s of the first, the rate is cut, nothing lost", async () => {
    const events = [...generateEvents({ count: 4000, apnsRatio: 1, deadTokenRatio: 0 })];
    // Every event is for a device of its own: no device's own limit is anywhere near.
    expect(new Set(events.map((e) => e.token)).size).toBe(events.length);
    rig = await startSlowProvider(events);
    const apns = rig.simulators.apns;
    // The simulator's sender-wide bucket answers 429 TooManyRequests, as Apple answers one device's.
    const senderThrottles = () => apns.throttles().filter((t) => t.scope === 'provider');

    await expectSenderThrottlesToStop(senderThrottles);
    expect((await bucketOf(rig, 'apns'))?.rateFactor).toBeLessThan(1);
    console.log(
      `APNs sender 429s: ${senderThrottles().length}, device 429s: ${apns.stats().deviceThrottled}`,
    );

    const ledger = await rig.settle(
      events.map((e) => e.id as string),
      120_000,
    );
    expect(ledger.delivered.size).toBe(events.length);
    expect(ledger.acceptedTotal).toBe(events.length);
    expect(ledger.deadLettered).toEqual([]);
  }, 240_000);

  it('reads them so in a campaign sent again to the same devices after a quiet spell, too', async () => {
    const first = [...generateEvents({ count: 3000, apnsRatio: 1, deadTokenRatio: 0 })];
    // The first campaign meets a provider as fast as configured: no 429.
    rig = await startSlowProvider(first);
    const apns = rig.simulators.apns;
    apns.setLimits({ rate: 2 * CONFIGURED.rate });
    await rig.settle(first.map((e) => e.id as string));
    expect(apns.throttles()).toEqual([]);
    // Every device was pushed to lately, until a quiet spell longer than FirstPushes remembers (20 s).
    await sleep(21_000);
    apns.setLimits({ rate: SLOW_RATE });
    // The same devices, none new: no push of it is a first push but for the time since the last.
    const second = first.map((event, i) => ({ ...event, id: `again-${i}` }));
    await publishEvents(rig.kafka, second, { topic: rig.topic });
    const senderThrottles = () => apns.throttles().filter((t) => t.scope === 'provider');

    await expectSenderThrottlesToStop(senderThrottles);
    expect((await bucketOf(rig, 'apns'))?.rateFactor).toBeLessThan(1);
    const ledger = await rig.settle(
      second.map((e) => e.id as string),
      120_000,
    );
    expect(ledger.acceptedTotal).toBe(first.length + second.length);
    expect(ledger.deadLettered).toEqual([]);
  }, 240_000);
});
