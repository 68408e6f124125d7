import { describe, expect, it } from 'vitest';
import type { NotificationEvent } from '../../src/events/event.ts';
import { DeviceBackoff } from '../../src/pipeline/device-backoff.ts';

const device = (token: string) => ({ platform: 'apns', token }) as NotificationEvent;
const HOT = device('hot');
const COLD = device('cold');

describe('DeviceBackoff', () => {
  it('lets every device send until the provider throttles one; then only that one waits, its events coming back in the order they were deferred', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, queueSpacingMs: 20 });
    expect(backoff.decide(HOT, 0)).toEqual({ send: true });
    backoff.throttled(HOT, 10, 500, 0);
    expect(backoff.decide(COLD, 20)).toEqual({ send: true });
    // Blocked until 510; the queue comes back from then on, 20 ms apart (half a spacing would be 50).
    expect([20, 20, 20].map((now) => backoff.decide(HOT, now))).toEqual([
      { send: false, notBefore: 510 },
      { send: false, notBefore: 530 },
      { send: false, notBefore: 550 },
    ]);
    expect(backoff.decide(HOT, 510)).toEqual({ send: true });
    // Back before the next send is due (610): to the back of the queue, not before that send.
    expect(backoff.decide(HOT, 530)).toEqual({ send: false, notBefore: 610 });
    expect(backoff.decide(HOT, 550)).toEqual({ send: false, notBefore: 630 });
  });

  it('lets a device behind its pace catch up by catchUpMs of sends at most', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, catchUpMs: 250 });
    backoff.throttled(HOT, 0, 0, 0);
    expect(backoff.decide(HOT, 0)).toEqual({ send: true });
    // Due at 100, the next events come at 1000: three go now (250 ms of sends after the first), the
    // next waits a spacing.
    expect([1000, 1000, 1000, 1000].map((now) => backoff.decide(HOT, now))).toEqual([
      { send: true },
      { send: true },
      { send: true },
      { send: false, notBefore: 1050 },
    ]);
  });

  it('gives a slot back for a send that did not go out (no token), so the next event goes at once', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, queueSpacingMs: 20 });
    backoff.throttled(HOT, 0, 0, 0);
    expect(backoff.decide(HOT, 0)).toEqual({ send: true });
    backoff.unsent(HOT);
    expect(backoff.decide(HOT, 10)).toEqual({ send: true });
    // Spent this time: the next is due a spacing after the previous slot (0).
    expect(backoff.decide(HOT, 20)).toEqual({ send: false, notBefore: 100 });
    // A device never throttled is not paced, and nothing is given back for it.
    backoff.unsent(COLD);
    expect(backoff.isPaced(COLD)).toBe(false);
  });

  it('on a throttle, falls back to a fifth under the pace of the latest deliveries but not under what they proved (less a tenth); a wave counts once', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100 });
    backoff.throttled(HOT, 0, 0, 0);
    // Ten deliveries 100 ms apart after the bucket was found empty prove 9 a second; their pace is 10.
    for (let t = 100; t <= 1000; t += 100) backoff.delivered(HOT, t);
    // The rate falls to 8.1 a second (the proof less a tenth; a fifth under the pace is 8).
    backoff.throttled(HOT, 1010, undefined, 1000);
    // A 429 for a push decided before that one was known: the same wave, the rate stays.
    backoff.throttled(HOT, 1015, undefined, 1005);
    // Blocked for one spacing (1000 / 8.1 ms) from the wave's last 429; the send after it one more.
    expect(backoff.decide(HOT, 1100)).toEqual({ send: false, notBefore: 1139 });
    expect(backoff.decide(HOT, 1139)).toEqual({ send: true });
    expect(backoff.decide(HOT, 1139)).toEqual({ send: false, notBefore: 1262 });
    // Refused again: the proof is worth 7.29 a second now, under a fifth off the pace (8).
    backoff.throttled(HOT, 1240, undefined, 1238);
    expect(backoff.decide(HOT, 1240)).toEqual({ send: false, notBefore: 1365 });
  });

  it('probes faster with each delivery while events wait (not in an idle spell), down to the narrowest spacing, and forgets a quiet device', () => {
    const backoff = new DeviceBackoff({ initialIntervalMs: 100, minIntervalMs: 50, idleMs: 1000 });
    backoff.throttled(HOT, 0, 0, 0);
    expect(backoff.decide(HOT, 0)).toEqual({ send: true });
    backoff.delivered(HOT, 0);
    expect(backoff.decide(HOT, 0)).toEqual({ send: false, notBefore: 100 });
    // With an event waiting, a delivery makes the device a quarter faster: the send after next is due
    // 80 ms after the next.
    backoff.delivered(HOT, 50);
    expect(backoff.decide(HOT, 100)).toEqual({ send: true });
    expect(backoff.decide(HOT, 100)).toEqual({ send: false, notBefore: 180 });
    for (let i = 0; i < 10; i++) backoff.delivered(HOT, 100);
    expect(backoff.decide(HOT, 180)).toEqual({ send: true });
    expect(backoff.decide(HOT, 180)).toEqual({ send: false, notBefore: 230 });
    expect(backoff.size).toBe(1);
    expect(backoff.decide(HOT, 230 + 1000)).toEqual({ send: true });
    expect(backoff.size).toBe(0);
  });

  it('remembers at most maxDevices devices, the oldest leaving first', () => {
    const backoff = new DeviceBackoff({ maxDevices: 2 });
    for (const token of ['a', 'b', 'c']) backoff.throttled(device(token), 0, 60_000, 0);
    expect(backoff.size).toBe(2);
    expect(backoff.decide(device('a'), 1)).toEqual({ send: true });
    expect(backoff.decide(device('c'), 1).send).toBe(false);
  });
});
