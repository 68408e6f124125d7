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

  it('reserves slots only up to the horizon; beyond it, queues without one, 3/4 of a spacing per place', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 400, horizonMs: 1000 });
    backoff.throttled(HOT, 0, 100, 0);
    const decisions = ['a', 'b', 'c', 'd', 'e'].map((id) => backoff.decide(HOT, id, 0));
    expect(decisions).toEqual([
      { send: false, notBefore: 100 },
      { send: false, notBefore: 500 },
      { send: false, notBefore: 900 },
      { send: false, notBefore: 1300 },
      { send: false, notBefore: 1600 },
    ]);
    // 'd' had no reservation: at 1300 it takes the free slot (no one reserved it)...
    expect(backoff.decide(HOT, 'd', 1300)).toEqual({ send: true });
    // ...and 'e', back early, the next one, reserved now that it is within the horizon.
    expect(backoff.decide(HOT, 'e', 1600)).toEqual({ send: false, notBefore: 1700 });
    // The queue is empty again: the next event beyond the horizon is first in it.
    expect(backoff.decide(HOT, 'f', 200)).toEqual({ send: false, notBefore: 2100 });
    expect(backoff.decide(HOT, 'g', 200)).toEqual({ send: false, notBefore: 2400 });
  });

  it('widens the spacing by half on a throttle decided after the last one, voiding older slots; a wave counts once', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, horizonMs: 10_000 });
    backoff.throttled(HOT, 0, 100, 0);
    // Nine more 429s of the same wave (sent before the first was known): no change.
    for (let i = 0; i < 9; i++) backoff.throttled(HOT, 1, 100, -1);
    expect(backoff.decide(HOT, 'a', 1)).toEqual({ send: false, notBefore: 101 });
    expect(backoff.decide(HOT, 'b', 1)).toEqual({ send: false, notBefore: 201 });
    // 'a' is sent at its slot and refused again: the spacing widens to 150 ms; b's slot is void, so b is
    // given the next free one, and the one after that is 150 ms later.
    expect(backoff.decide(HOT, 'a', 101)).toEqual({ send: true });
    backoff.throttled(HOT, 105, 0, 101);
    expect(backoff.decide(HOT, 'b', 201)).toEqual({ send: false, notBefore: 301 });
    expect(backoff.decide(HOT, 'c', 201)).toEqual({ send: false, notBefore: 451 });
  });

  it('narrows the spacing on each delivery, down to its floor, and forgets a quiet device', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, minIntervalMs: 50, idleMs: 1000 });
    backoff.throttled(HOT, 0, 0, 0);
    for (let i = 0; i < 20; i++) backoff.delivered(HOT);
    expect(backoff.decide(HOT, 'a', 0)).toEqual({ send: true });
    expect(backoff.decide(HOT, 'b', 0)).toEqual({ send: false, notBefore: 50 });
    expect(backoff.size).toBe(1);
    expect(backoff.decide(HOT, 'c', 50 + 50 + 1000)).toEqual({ send: true });
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
