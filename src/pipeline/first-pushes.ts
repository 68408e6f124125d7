import { type Fingerprint, RecentKeys } from './recent-keys.ts';

/**
 * Which pushes are the first to their device lately, as this process sends them: the evidence that a
 * throttle documented as one device's (APNs `TooManyRequests`) is the sender's after all. A device's
 * own limit counts the pushes made to that device, so it cannot refuse the first one after a quiet
 * spell; an endpoint that throttles the sender as a whole, with the same answer, refuses first pushes
 * as readily as any. One device's first push refused is not enough, nor are two: events a producer
 * did not key by device reach every process, and the others may have spent a device's limit (two
 * devices flooded at once, each held to a push at a time, do that in one process after another). Three
 * devices' first pushes refused within a second are (see {@link FirstPushes.refusedFirst}).
 *
 * "Lately" is within the last `forgetAfterMs` to twice that (10 to 20 s), and among the last
 * `capacity / 2` to `capacity` devices pushed to (two generations, see RecentKeys; the newer one starts
 * when the older fills up or is `forgetAfterMs` old): at 800 pushes a second to distinct devices the
 * time decides, at 10 000 the count (5 to 10 s). Time, because a campaign sent again to the same
 * devices a minute later pushes to every device after a quiet spell: its first pushes refused are as
 * telling as those of new devices.
 * A device is told apart by a 64-bit fingerprint of its token; the token itself is not kept.
 */
export class FirstPushes {
  private readonly recent: RecentKeys;
  private readonly forgetAfterMs: number;
  /** When the newer generation of `recent` started. */
  private generationStartedMs: number | undefined;
  /** The latest first pushes refused with a device's throttle, of distinct devices, oldest first. */
  private refused: Array<{ fingerprint: Fingerprint; atMs: number }> = [];

  constructor(capacity = 100_000, forgetAfterMs = 10_000) {
    this.recent = new RecentKeys(capacity);
    this.forgetAfterMs = forgetAfterMs;
  }

  /** Records a push to `token` at `nowMs`; true when no push to it is recorded lately. */
  record(token: string, nowMs: number = Date.now()): boolean {
    this.age(nowMs);
    const fingerprint = fingerprintOf(token);
    const seen = this.recent.has(fingerprint);
    // Added again when seen only in the older generation, so that a device pushed to all along stays.
    this.recent.add(fingerprint);
    return !seen;
  }

  /** Forgets what is older than `forgetAfterMs` to twice that at `nowMs` (both generations after a long quiet). */
  private age(nowMs: number): void {
    const started = this.generationStartedMs ?? nowMs;
    const elapsed = nowMs - started;
    if (elapsed >= this.forgetAfterMs) this.recent.rotate();
    if (elapsed >= 2 * this.forgetAfterMs) this.recent.rotate();
    if (elapsed >= this.forgetAfterMs || this.generationStartedMs === undefined)
      this.generationStartedMs = nowMs;
  }

  /**
   * A first push to `token` was refused with a device's throttle at `nowMs`: true when first pushes to
   * two other devices were refused so within the second before, which no device's own limit explains.
   */
  refusedFirst(token: string, nowMs: number): boolean {
    const fingerprint = fingerprintOf(token);
    const others = this.refused.filter(
      (entry) =>
        nowMs - entry.atMs <= REFUSALS_WITHIN_MS &&
        (entry.fingerprint.high !== fingerprint.high || entry.fingerprint.low !== fingerprint.low),
    );
    this.refused = [...others, { fingerprint, atMs: nowMs }].slice(1 - REFUSED_DEVICES);
    return others.length + 1 >= REFUSED_DEVICES;
  }
}

/** How many devices' first pushes refused within REFUSALS_WITHIN_MS tell the sender's throttle. */
const REFUSED_DEVICES = 3;

/** How close together the devices' refused first pushes must be to tell the sender's throttle. */
const REFUSALS_WITHIN_MS = 1000;

/**
 * A fast 64-bit fingerprint of a string (the mixing of cyrb53, two 32-bit lanes): a hash per push, where
 * a collision only makes a first push look like a second one (a throttle then stays the device's).
 */
export function fingerprintOf(text: string): Fingerprint {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return { high: h1 >>> 0, low: h2 >>> 0 };
}
