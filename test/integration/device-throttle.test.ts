import { afterEach, describe, expect, it } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { publishRaw } from '../../testkit/raw-publish.ts';
import { eventIdOf, readTopic } from '../../testkit/topics.ts';
import { type Rig, startRig, summedTotal } from '../helpers/pipeline.ts';

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

/** The flooded device's own limit at both simulators: 10 pushes a second, 5 at once. */
const DEVICE = { rate: 10, burst: 5 };
const FLOOD = 500;
const OTHERS = 5000;

/** `FLOOD` events for one APNs device spread evenly among `OTHERS` for distinct devices, both providers. */
function floodAmongOthers(): { events: NotificationEventInput[]; flood: Set<string>; token: string } {
  const token = 'f1'.repeat(32);
  const flood = [...generateEvents({ count: FLOOD, apnsRatio: 1, idPrefix: `flood-${Date.now()}` })].map(
    (event) => ({ ...event, token }),
  );
  const others = [...generateEvents({ count: OTHERS, apnsRatio: 0.5 })];
  const events: NotificationEventInput[] = [];
  const every = Math.floor(OTHERS / FLOOD);
  for (const [i, event] of others.entries()) {
    events.push(event);
    if (i % every === every - 1) events.push(flood[Math.floor(i / every)] as NotificationEventInput);
  }
  return { events, flood: new Set(flood.map((e) => e.id)), token };
}

/**
 * Published keyed by device (`aqueduct publish`: one device's events in one partition) or without keys
 * (Kafka's console producer by default: one device's events in every partition, so every consumer
 * pushes to it).
 */
const PUBLISHED = [
  { as: 'keyed by device', keyed: true },
  { as: 'without keys', keyed: false },
] as const;

describe('a device flooded among others (real Kafka, Redis, simulators, consumer processes)', () => {
  it.each(PUBLISHED)(
    "backs off the flooded device only, its events published $as: the others are delivered without a fleet block, the device's events within its own limit, nothing lost or pushed twice",
    async ({ keyed }) => {
      rig = await startRig({
        partitions: 4,
        rate: 400,
        burst: 100,
        simulator: { deviceRate: DEVICE.rate, deviceBurst: DEVICE.burst },
        env: { AQUEDUCT_MAX_ATTEMPTS: '10' },
      });
      const { events, flood } = floodAmongOthers();
      if (keyed) await publishEvents(rig.kafka, events, { topic: rig.topic });
      else
        await publishRaw(
          rig.kafka,
          rig.topic,
          events.map((event) => ({ value: JSON.stringify(event) })),
        );
      await Promise.all([rig.startConsumer('a'), rig.startConsumer('b')]);
      const ledger = await rig.settle(
        events.map((e) => e.id as string),
        420_000,
      );
      await Promise.all(rig.consumers.map((c) => c.stop()));
      const { fcm, apns } = rig.simulators;

      // Nothing lost, nothing dead-lettered, nothing pushed twice.
      expect(ledger.deadLettered).toEqual([]);
      expect(ledger.delivered).toEqual(new Set(events.map((e) => e.id)));
      expect(ledger.acceptedTotal).toBe(ledger.delivered.size);

      // Only the device's own limit refused anything; no bucket of the fleet was ever blocked.
      expect(fcm.stats().throttled + apns.stats().throttled).toBe(0);
      expect(fcm.stats().deviceThrottled).toBe(0);
      expect(apns.stats().deviceThrottled).toBeGreaterThan(0);
      const blocks: string[] = [];
      for (const key of await rig.redis.keys('*')) {
        if ((await rig.redis.type(key)) !== 'hash') continue;
        const until = await rig.redis.hget(key, 'blocked_until');
        if (until !== null) blocks.push(`${key}=${until}`);
      }
      expect(blocks).toEqual([]);

      // Every retry copy of the flooded device went to one partition of the retry topic, so that one
      // process reads its queue back and paces it: copies of a message without a key are keyed by device.
      const retryPartitions = new Set(
        (await readTopic(rig.kafka, topicFamily(rig.topic).retry))
          .filter((m) => flood.has(eventIdOf(m.value) ?? ''))
          .map((m) => m.partition),
      );
      expect(retryPartitions.size).toBe(1);

      // The flooded device's events reached APNs within its limit (burst, then its rate), as recorded
      // by the simulator; and the pacing spent few of the fleet's tokens on refused pushes: fewer
      // 429s than flood events (without it, every retry round would send all that was left, and
      // events would run out of attempts).
      const floodArrivals = apns
        .records()
        .filter((r) => r.eventId !== undefined && flood.has(r.eventId))
        .map((r) => r.arrivedAtMs)
        .sort((a, b) => a - b);
      expect(floodArrivals).toHaveLength(FLOOD);
      for (let i = 0; i < floodArrivals.length; i++) {
        for (let j = i + DEVICE.burst; j < floodArrivals.length; j += 25) {
          const seconds = ((floodArrivals[j] as number) - (floodArrivals[i] as number)) / 1000;
          expect(j - i + 1).toBeLessThanOrEqual(DEVICE.burst + DEVICE.rate * seconds + 1);
        }
      }
      expect(apns.stats().deviceThrottled).toBeLessThan(FLOOD);

      // The flooded device's events arrived at its own limit: over the flood, at least 0.85 of the
      // device's rate (measured at 0.915–0.972 of it in eight runs: its due sends go first for the fleet's
      // tokens, also while the other devices' backlog keeps the bucket short; what is left is the probing
      // of a limit learned per process, which a busier machine slows; CI runs a second test file beside
      // this one), and never above what its bucket lets through (its burst at once, then its rate).
      const floodSeconds = ((floodArrivals.at(-1) as number) - (floodArrivals[0] as number)) / 1000;
      const floodRate = (FLOOD - DEVICE.burst) / floodSeconds;
      expect(floodRate).toBeGreaterThanOrEqual(0.85 * DEVICE.rate);
      expect(FLOOD).toBeLessThanOrEqual(DEVICE.burst + DEVICE.rate * floodSeconds + 1);

      // The other devices did not wait for the flood: both providers had accepted every one of their
      // events while the flooded device still had events to go. (The device's limit alone keeps its
      // last event at least (500 - 5) / 10 = 49.5 s after its first; the others need about 6 s at the
      // bucket's rate.)
      const othersLast = Math.max(
        ...[...fcm.records(), ...apns.records()]
          .filter((r) => r.eventId !== undefined && !flood.has(r.eventId))
          .map((r) => r.arrivedAtMs),
      );
      const floodLeftThen = floodArrivals.filter((at) => at > othersLast).length;
      console.log(
        `device 429s ${apns.stats().deviceThrottled}, deferred ${summedTotal(rig.consumers, 'deviceDeferred')}, flood events left when the others were done: ${floodLeftThen}; flood delivered over ${floodSeconds.toFixed(1)} s (its limit allows ${((FLOOD - DEVICE.burst) / DEVICE.rate).toFixed(1)} s: ${(floodRate / DEVICE.rate).toFixed(3)} of the device's rate)`,
      );
      expect(floodLeftThen).toBeGreaterThan(0);
    },
    480_000,
  );
});
