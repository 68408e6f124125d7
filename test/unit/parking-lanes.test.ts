import { describe, expect, it } from 'vitest';
import { parkedPartition } from '../../src/pipeline/parking-lanes.ts';

describe('parkedPartition: one lane of the deferred topic per provider', () => {
  it('puts FCM events on the even partitions and APNs events on the odd ones, each over all of its lane', () => {
    for (const partitions of [2, 5, 6, 7]) {
      const seen = { fcm: new Set<number>(), apns: new Set<number>() };
      for (let i = 0; i < 500; i++) {
        for (const platform of ['fcm', 'apns'] as const) {
          const partition = parkedPartition(platform, `device-${i}`, partitions);
          expect(partition).toBeGreaterThanOrEqual(0);
          expect(partition).toBeLessThan(partitions);
          seen[platform].add(partition);
        }
      }
      const lane = (first: number) =>
        Array.from({ length: partitions }, (_, p) => p).filter((p) => p % 2 === first);
      expect([...seen.fcm].sort()).toEqual(lane(0));
      expect([...seen.apns].sort()).toEqual(lane(1));
    }
  });

  it('keeps the events of one key on one partition, with a string or a buffer key', () => {
    const a = parkedPartition('apns', 'order-42', 6);
    expect(parkedPartition('apns', 'order-42', 6)).toBe(a);
    expect(parkedPartition('apns', Buffer.from('order-42'), 6)).toBe(a);
  });

  it('places an event without a key in its lane, and everything on the only partition of a one-partition topic', () => {
    for (let i = 0; i < 50; i++) {
      expect(parkedPartition('fcm', null, 6) % 2).toBe(0);
      expect(parkedPartition('apns', null, 6) % 2).toBe(1);
      expect(parkedPartition('apns', `k${i}`, 1)).toBe(0);
    }
  });
});
