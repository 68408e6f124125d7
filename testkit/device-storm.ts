import type { Simulators } from './simulators.ts';
import { replay } from './steady-rate.ts';

/** The other devices' deliveries at one provider while a device is flooded. */
export interface OtherDevicesRate {
  /** Other devices' events the provider accepted in the window. */
  delivered: number;
  /** The window: from the bucket's burst spent to the other devices' last acceptance (see otherDevicesRate). */
  seconds: number;
  /** delivered / seconds. */
  perSecond: number;
  /** perSecond / the bucket's rate (Aqueduct's, per provider). */
  ofBucketRate: number;
}

/**
 * The rate at which a provider accepted the other devices' events while they had work. Aqueduct's
 * bucket is replayed over every request the provider saw (accepted or refused, the flooded device's
 * included: each took a token), as testkit/steady-rate.ts does; the window runs from the first time
 * the level falls to a tenth of the burst above its lowest (the burst allowance spent) to the last
 * time it does so up to the other devices' last acceptance, so that the bucket holds about the same at
 * both ends and no saved-up allowance counts as rate. What the flooded device takes (its accepted
 * pushes and its 429s) comes out of the same bucket, so the share left to the others shows here.
 */
export function otherDevicesRate(
  simulator: Simulators['fcm'] | Simulators['apns'],
  floodIds: ReadonlySet<string>,
  bucket: { rate: number; burst: number },
): OtherDevicesRate {
  const requests = [...simulator.admissions(), ...simulator.throttles().map((t) => t.atMs)].sort(
    (a, b) => a - b,
  );
  const others = simulator
    .records()
    .filter((r) => r.eventId === undefined || !floodIds.has(r.eventId))
    .map((r) => r.arrivedAtMs)
    .sort((a, b) => a - b);
  const last = others.at(-1);
  const levels = replay(requests, bucket);
  const lowest = levels.reduce((low, l) => Math.min(low, l.after), bucket.burst);
  const line = lowest + bucket.burst / 10;
  const crossings = levels.filter(
    (l) => l.before > line && l.after <= line && last !== undefined && l.at <= last,
  );
  const from = crossings[0]?.at;
  const to = crossings.at(-1)?.at;
  if (from === undefined || to === undefined || to <= from) {
    return { delivered: 0, seconds: 0, perSecond: 0, ofBucketRate: 0 };
  }
  const delivered = others.filter((at) => at >= from && at < to).length;
  const seconds = (to - from) / 1000;
  const perSecond = delivered / seconds;
  return {
    delivered,
    seconds: Math.round(seconds * 100) / 100,
    perSecond: Math.round(perSecond * 10) / 10,
    ofBucketRate: Math.round((perSecond / bucket.rate) * 1000) / 1000,
  };
}
