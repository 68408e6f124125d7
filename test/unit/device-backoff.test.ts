import { describe, expect, it } from 'vitest';
import type { NotificationEvent } from '../../src/events/event.ts';
import { DeviceBackoff } from '../../src/pipeline/device-backoff.ts';

const device = (token: string) => ({ platform: 'apns', token }) as NotificationEvent;
const HOT = device('hot');
const COLD = device('cold');

describe('DeviceBackoff', () => {
  it('lets every device send until the provider throttles one; then only that one waits', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, horizonMs: 1000 });
    expect(backoff.decide(HOT, 'a', 0)).toEqual({ send: true });
    backoff.throttled(HOT, 10, 500, 0);
    expect(backoff.decide(COLD, 'b', 20)).toEqual({ send: true });
    // Blocked until 510, then one slot every 100 ms, each reserved for its event.
    expect(backoff.decide(HOT, 'c', 20)).toEqual({ send: false, notBefore: 510 });
    expect(backoff.decide(HOT, 'd', 20)).toEqual({ send: false, notBefore: 610 });
    // Its reservation honoured when it comes back, whatever else was reserved since.
    expect(backoff.decide(HOT, 'c', 510)).toEqual({ send: true });
    expect(backoff.decide(HOT, 'd', 612)).toEqual({ send: true });
    // A new event once the slots are used: its own slot, one spacing later.
    expect(backoff.decide(HOT, 'e', 612)).toEqual({ send: false, notBefore: 710 });
  });

  it('reserves slots up to the horizon; beyond it, gives a place in the queue, kept while the event is away', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 400, horizonMs: 1000 });
    backoff.throttled(HOT, 0, 100, 0);
    const decisions = ['a', 'b', 'c', 'd', 'e'].map((id) => backoff.decide(HOT, id, 0));
    // Slots at 100, 500 and 900; 'd' is first in the queue: back when the next free slot (1300) is
    // within the horizon; 'e' one place later, back after the slot before it would be used up at
    // half as fast again as the rate (400 / 1.5 ms).
    expect(decisions).toEqual([
      { send: false, notBefore: 100 },
      { send: false, notBefore: 500 },
      { send: false, notBefore: 900 },
      { send: false, notBefore: 300 },
      { send: false, notBefore: 567 },
    ]);
    expect(backoff.decide(HOT, 'd', 300)).toEqual({ send: false, notBefore: 1300 });
    // 'e' is back with no one before it now: back again when its slot is within the horizon...
    expect(backoff.decide(HOT, 'e', 567)).toEqual({ send: false, notBefore: 700 });
    expect(backoff.decide(HOT, 'e', 700)).toEqual({ send: false, notBefore: 1700 });
    // ...and a newcomer queues after it.
    expect(backoff.decide(HOT, 'f', 700)).toEqual({ send: false, notBefore: 1100 });
  });

  it('sends a queued event back at most queueReturnMaxMs away while the rate is still unproven', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 1000, horizonMs: 1000, queueReturnMaxMs: 2000 });
    backoff.throttled(HOT, 0, 0, 0);
    const notBefore = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((id) => {
      const decision = backoff.decide(HOT, id, 0);
      return decision.send ? 0 : decision.notBefore;
    });
    expect(notBefore).toEqual([0, 1000, 1000, 1667, 2334, 3000, 3000]);
  });

  it('on a throttle, falls back to a fifth under the pace of the latest deliveries but not under what they proved (less a tenth), and voids the slots given; a wave counts once', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, horizonMs: 10_000 });
    backoff.throttled(HOT, 0, 0, 0);
    // Ten deliveries 100 ms apart after the bucket was found empty prove 9 a second; their pace is 10.
    for (let t = 100; t <= 1000; t += 100) backoff.delivered(HOT, t);
    expect(backoff.decide(HOT, 'a', 1000)).toEqual({ send: true });
    expect(backoff.decide(HOT, 'b', 1000)).toEqual({ send: false, notBefore: 1100 });
    // The rate falls to 8.1 a second (the proof less a tenth; a fifth under the pace is 8).
    backoff.throttled(HOT, 1010, undefined, 1000);
    // A 429 for a push decided before that one was known: the same wave, the rate stays.
    backoff.throttled(HOT, 1015, undefined, 1005);
    // b's slot is void: it gets the first one after the block (one spacing of 1000 / 8.1 ms from the
    // wave's last 429), and the next slot is one such spacing later.
    expect(backoff.decide(HOT, 'b', 1100)).toEqual({ send: false, notBefore: 1139 });
    expect(backoff.decide(HOT, 'c', 1100)).toEqual({ send: false, notBefore: 1262 });
    // Refused again: the proof is worth 7.29 a second now, under a fifth off the pace (8).
    backoff.throttled(HOT, 1240, undefined, 1238);
    expect(backoff.decide(HOT, 'd', 1240)).toEqual({ send: false, notBefore: 1365 });
    expect(backoff.decide(HOT, 'e', 1240)).toEqual({ send: false, notBefore: 1490 });
  });

  it('probes faster with each delivery while events wait (not in an idle spell), down to the narrowest spacing, and forgets a quiet device', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, minIntervalMs: 50, idleMs: 1000 });
    backoff.throttled(HOT, 0, 0, 0);
    expect(backoff.decide(HOT, 'a', 0)).toEqual({ send: true });
    backoff.delivered(HOT, 0);
    expect(['b', 'c', 'd'].map((id) => backoff.decide(HOT, id, 0))).toEqual([
      { send: false, notBefore: 100 },
      { send: false, notBefore: 200 },
      { send: false, notBefore: 300 },
    ]);
    // A quarter faster: the time not given yet (from 100 to 400) holds more slots.
    backoff.delivered(HOT, 100);
    expect(backoff.decide(HOT, 'e', 100)).toEqual({ send: false, notBefore: 340 });
    for (let i = 0; i < 10; i++) backoff.delivered(HOT, 100);
    expect(backoff.decide(HOT, 'f', 100)).toEqual({ send: false, notBefore: 300 });
    expect(backoff.decide(HOT, 'g', 100)).toEqual({ send: false, notBefore: 350 });
    expect(backoff.size).toBe(1);
    expect(backoff.decide(HOT, 'h', 400 + 1000)).toEqual({ send: true });
    expect(backoff.size).toBe(0);
  });

  it('remembers at most maxDevices devices, the oldest leaving first', () => {
    const backoff = new DeviceBackoff({ maxDevices: 2 });
    for (const token of ['a', 'b', 'c']) backoff.throttled(device(token), 0, 60_000, 0);
    expect(backoff.size).toBe(2);
    expect(backoff.decide(device('a'), 'x', 1)).toEqual({ send: true });
    expect(backoff.decide(device('c'), 'y', 1).send).toBe(false);
  });
});
