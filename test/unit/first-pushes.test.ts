import { describe, expect, it } from 'vitest';
import { FirstPushes, fingerprintOf } from '../../src/pipeline/first-pushes.ts';

describe('FirstPushes', () => {
  it('says a push is the first to its device until the device was pushed to', () => {
    const pushes = new FirstPushes(100);
    expect(pushes.record('device-a')).toBe(true);
    expect(pushes.record('device-a')).toBe(false);
    expect(pushes.record('device-b')).toBe(true);
    expect(pushes.record('device-a')).toBe(false);
  });

  it('forgets a device once `capacity` other devices were pushed to since, but not one pushed to all along', () => {
    const pushes = new FirstPushes(100);
    pushes.record('quiet');
    pushes.record('busy');
    for (let i = 0; i < 300; i++) {
      pushes.record(`other-${i}`);
      if (i % 10 === 0) expect(pushes.record('busy')).toBe(false);
    }
    expect(pushes.record('quiet')).toBe(true);
    expect(pushes.record('busy')).toBe(false);
  });

  it('forgets a device not pushed to for twice `forgetAfterMs`, and keeps one pushed to within it', () => {
    const pushes = new FirstPushes(100, 1000);
    expect(pushes.record('quiet', 0)).toBe(true);
    expect(pushes.record('steady', 0)).toBe(true);
    expect(pushes.record('quiet', 900)).toBe(false);
    for (const at of [1500, 2500, 3500]) expect(pushes.record('steady', at)).toBe(false);
    // quiet was last pushed at 900: remembered at 1900 at the latest, forgotten by 2900.
    expect(pushes.record('quiet', 3500)).toBe(true);
    // A long quiet spell forgets everything at once; what is pushed after it is remembered again.
    expect(pushes.record('steady', 60_000)).toBe(true);
    expect(pushes.record('quiet', 60_000)).toBe(true);
    expect(pushes.record('steady', 60_001)).toBe(false);
  });

  it("tells the sender's throttle from three devices' first pushes refused within a second, not two, nor one device's again", () => {
    const pushes = new FirstPushes(100);
    expect(pushes.refusedFirst('device-a', 1000)).toBe(false);
    expect(pushes.refusedFirst('device-a', 1200)).toBe(false);
    expect(pushes.refusedFirst('device-b', 1300)).toBe(false);
    expect(pushes.refusedFirst('device-b', 1400)).toBe(false);
    // device-a's refusal at 1200 is more than a second old: two devices within the second.
    expect(pushes.refusedFirst('device-c', 2300)).toBe(false);
    // device-b (1400), device-c and device-d within the second.
    expect(pushes.refusedFirst('device-d', 2350)).toBe(true);
    expect(pushes.refusedFirst('device-e', 2600)).toBe(true);
    expect(pushes.refusedFirst('device-f', 3500)).toBe(false);
  });

  it('fingerprints distinct tokens apart (no collision among 200 000 APNs-like tokens)', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200_000; i++) {
      const { high, low } = fingerprintOf(i.toString(16).padStart(64, '0'));
      seen.add(`${high}:${low}`);
    }
    expect(seen.size).toBe(200_000);
  });
});
