import type { Simulators } from './simulators.ts';

/** The other devices' deliveries at one provider while a device is flooded. */
export interface OtherDevicesRate {
  /** Other devices' events the provider accepted in the window. */
  delivered: number;
  /** The window: from the moment the bucket's burst was spent to the last other device's acceptance. */
  seconds: number;
  /** delivered / seconds. */
  perSecond: number;
  /** perSecond / the bucket's rate (Aqueduct's, per provider). */
  ofBucketRate: number;
}

/**
 * The rate at which a provider accepted the other devices' events while they had work: from the
 * moment the provider had seen as many requests as Aqueduct's bucket holds (its burst spent: every
 * request takes a token, refused ones too) to the last other device's acceptance. What the flooded
 * device takes (its accepted pushes and its 429s) comes out of the same bucket, so the share left to
 * the others shows here.
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
  const from = requests[Math.min(bucket.burst, requests.length - 1)];
  const to = others.at(-1);
  if (from === undefined || to === undefined || to <= from) {
    return { delivered: 0, seconds: 0, perSecond: 0, ofBucketRate: 0 };
  }
  const delivered = others.filter((at) => at > from && at <= to).length;
  const seconds = (to - from) / 1000;
  const perSecond = delivered / seconds;
  return {
    delivered,
    seconds: Math.round(seconds * 100) / 100,
    perSecond: Math.round(perSecond * 10) / 10,
    ofBucketRate: Math.round((perSecond / bucket.rate) * 1000) / 1000,
  };
}
