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

/** The flooded device's deliveries against its own limit at the provider. */
export interface FloodedDeviceRate {
  /** Flood events the provider accepted. */
  delivered: number;
  /** From its first acceptance to its last. */
  seconds: number;
  /** What its limit needs for them: all but the burst at the device's rate. */
  idealSeconds: number;
  /** idealSeconds / seconds: 1 is the device's own limit, met exactly. */
  ofDeviceLimit: number;
}

/**
 * How close the flooded device's events came to its own limit: the provider's device bucket lets
 * `burst` through at once and then `rate` a second, so `delivered` acceptances need at least
 * (delivered − burst) / rate seconds from the first to the last.
 */
export function floodedDeviceRate(
  simulator: Simulators['fcm'] | Simulators['apns'],
  floodIds: ReadonlySet<string>,
  device: { rate: number; burst: number },
): FloodedDeviceRate {
  const arrivals = simulator
    .records()
    .filter((r) => r.eventId !== undefined && floodIds.has(r.eventId))
    .map((r) => r.arrivedAtMs)
    .sort((a, b) => a - b);
  const seconds = arrivals.length < 2 ? 0 : ((arrivals.at(-1) as number) - (arrivals[0] as number)) / 1000;
  const idealSeconds = Math.max(0, arrivals.length - device.burst) / device.rate;
  return {
    delivered: arrivals.length,
    seconds: Math.round(seconds * 100) / 100,
    idealSeconds: Math.round(idealSeconds * 100) / 100,
    ofDeviceLimit: seconds > 0 ? Math.round((idealSeconds / seconds) * 1000) / 1000 : 0,
  };
}

/** How long the other devices' events took to drain at one provider, against the bucket's time for them. */
export interface OtherDevicesDrain {
  /** Other devices' events the provider accepted. */
  delivered: number;
  /** From the first of them to the last. */
  seconds: number;
  /** What Aqueduct's bucket needs for them: all but its burst at its rate. */
  idealSeconds: number;
  /** idealSeconds / seconds. */
  ofIdeal: number;
}

/**
 * The other devices' drain at a provider: from the first of their events the provider accepted to the
 * last, against the (delivered − burst) / rate seconds Aqueduct's bucket needs for that many (a run
 * with no dead tokens, so that every request for them is an acceptance).
 */
export function otherDevicesDrain(
  simulator: Simulators['fcm'] | Simulators['apns'],
  floodIds: ReadonlySet<string>,
  bucket: { rate: number; burst: number },
): OtherDevicesDrain {
  const times = simulator
    .records()
    .filter((r) => r.eventId === undefined || !floodIds.has(r.eventId))
    .map((r) => r.arrivedAtMs)
    .sort((a, b) => a - b);
  const seconds = times.length < 2 ? 0 : ((times.at(-1) as number) - (times[0] as number)) / 1000;
  const idealSeconds = Math.max(0, times.length - bucket.burst) / bucket.rate;
  return {
    delivered: times.length,
    seconds: Math.round(seconds * 100) / 100,
    idealSeconds: Math.round(idealSeconds * 100) / 100,
    ofIdeal: seconds > 0 ? Math.round((idealSeconds / seconds) * 1000) / 1000 : 0,
  };
}
