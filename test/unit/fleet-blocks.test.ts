import { describe, expect, it } from 'vitest';
import { FleetBlocks } from '../../src/pipeline/fleet-blocks.ts';

describe('FleetBlocks', () => {
  it('takes Retry-After as it is, and counts no wave for it', () => {
    const blocks = new FleetBlocks();
    expect(blocks.blockMs('fcm', 7_000, 0, 10)).toBe(7_000);
    expect(blocks.blockMs('fcm', undefined, 20, 30)).toBe(1_000);
  });

  it('doubles per wave: only a throttle of a push decided after the latest block starts a new one', () => {
    const blocks = new FleetBlocks();
    expect(blocks.blockMs('fcm', undefined, 0, 100)).toBe(1_000);
    // Pushes decided before that block was set, answered later: the same wave.
    expect(blocks.blockMs('fcm', undefined, 50, 120)).toBe(1_000);
    expect(blocks.blockMs('fcm', undefined, 100, 130)).toBe(1_000);
    expect(blocks.blockMs('fcm', undefined, 101, 1_200)).toBe(2_000);
    expect(blocks.blockMs('fcm', undefined, 1_201, 3_300)).toBe(4_000);
    // The other provider's waves are its own.
    expect(blocks.blockMs('apns', undefined, 1_201, 3_300)).toBe(1_000);
  });

  it('starts again from 1 s once a push decided after the latest block is delivered', () => {
    const blocks = new FleetBlocks();
    blocks.blockMs('fcm', undefined, 0, 100);
    blocks.blockMs('fcm', undefined, 101, 1_200);
    blocks.accepted('fcm', 1_000); // decided before the latest block: says nothing about it
    expect(blocks.blockMs('fcm', undefined, 1_100, 1_300)).toBe(2_000);
    blocks.accepted('fcm', 1_201);
    expect(blocks.blockMs('fcm', undefined, 1_400, 5_000)).toBe(1_000);
  });

  it('never overflows: the doubling stops at 2^30 s, the caller caps it further', () => {
    const blocks = new FleetBlocks();
    let decided = 0;
    let last = 0;
    for (let wave = 0; wave < 40; wave++) {
      last = blocks.blockMs('apns', undefined, decided, decided + 1);
      decided += 2;
    }
    expect(last).toBe(1_000 * 2 ** 30);
  });
});
