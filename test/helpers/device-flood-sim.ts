import type { NotificationEvent } from '../../src/events/event.ts';
import { DeviceBackoff, MAX_PER_DEVICE_PER_STEP } from '../../src/pipeline/device-backoff.ts';
import { TokenBucket } from '../../src/simulators/token-bucket.ts';

/** One flood, simulated on a fake clock: how the pacing of DeviceBackoff meets a device's own bucket. */
export interface FloodSimOptions {
  /** The device's limit at the provider: pushes a second, and at once. */
  rate: number;
  burst: number;
  /** Events for the device, first read evenly over `arrivalMs` (their places in the main topic). */
  events: number;
  arrivalMs: number;
  /**
   * A deferred event is read again this long after its `notBefore` (the retry topic's round trip): at
   * random in [min, max].
   */
  lateMs: [number, number];
  /**
   * Records of the retry topic read at once, from its oldest unfinished one (a fetch's worth: 256 KiB
   * of ~550-byte records is about 450): an event deferred beyond them waits until the ones before it
   * are finished.
   */
  fetchWindow: number;
  /**
   * The retry topic is fetched every this many ms (0: as soon as a record is due): what came due
   * meanwhile is read at once, as a consumer busy with other partitions reads it.
   */
  fetchEveryMs: number;
  /** The provider's answer comes this long after the push is decided. */
  answerMs: number;
  /** Attempts before an event is dead-lettered. */
  maxAttempts: number;
  seed: number;
}

export interface FloodSimResult {
  delivered: number;
  deadLettered: number;
  throttled: number;
  deferred: number;
  /** From the first delivery to the last, against the device's limit ((events - burst) / rate). */
  seconds: number;
  ofDeviceLimit: number;
  /** Most deliveries within any window beyond what the device's bucket allows (0: never above it). */
  overLimit: number;
}

const DEVICE = { platform: 'apns', token: 'flooded' } as NotificationEvent;
const STEP_MS = 20;

/** Runs the flood through a fresh DeviceBackoff in steps of 20 ms, as the batch processor does. */
export function simulateFlood(options: FloodSimOptions): FloodSimResult {
  let seed = options.seed;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const late = () => options.lateMs[0] + random() * (options.lateMs[1] - options.lateMs[0]);
  const backoff = new DeviceBackoff();
  const bucket = new TokenBucket(options.rate, options.burst, 0);
  let pending = Array.from({ length: options.events }, (_, i) => ({
    id: `e${i}`,
    due: Math.round((i * options.arrivalMs) / options.events),
    attempt: 1,
    /** Its offset on the retry topic (-1: still on the main topic). */
    offset: -1,
  }));
  let nextOffset = 0;
  const arrivals: number[] = [];
  let throttled = 0;
  let deferred = 0;
  let deadLettered = 0;
  for (let now = 0; now < 3_600_000 && pending.length > 0; now += STEP_MS) {
    const oldestUnfinished = Math.min(...pending.filter((p) => p.offset >= 0).map((p) => p.offset));
    const fetched = (p: (typeof pending)[number]) =>
      options.fetchEveryMs === 0 || Math.ceil(p.due / options.fetchEveryMs) * options.fetchEveryMs <= now;
    const inReach = (p: (typeof pending)[number]) =>
      p.offset < 0 || (p.offset < oldestUnfinished + options.fetchWindow && fetched(p));
    const due = pending.filter((p) => p.due <= now && inReach(p)).sort((a, b) => a.due - b.due);
    if (due.length === 0) continue;
    const taken = new Set(due);
    pending = pending.filter((p) => !taken.has(p));
    const sends: typeof pending = [];
    for (const p of due) {
      if (sends.length >= MAX_PER_DEVICE_PER_STEP) {
        pending.push(p);
        continue;
      }
      const decision = backoff.decide(DEVICE, now);
      if (decision.send) sends.push(p);
      else {
        deferred++;
        pending.push({
          ...p,
          due: Math.max(now + STEP_MS, decision.notBefore + late()),
          offset: nextOffset++,
        });
      }
    }
    const answeredAt = now + options.answerMs;
    for (const p of sends) {
      if (bucket.take(now + 1) === 0) {
        arrivals.push(now + 1);
        backoff.delivered(DEVICE, now);
        continue;
      }
      throttled++;
      backoff.throttled(DEVICE, answeredAt, undefined, now);
      if (p.attempt >= options.maxAttempts) {
        deadLettered++;
        continue;
      }
      const delay = 1000 * 2 ** (p.attempt - 1) * (0.75 + random() * 0.5);
      pending.push({
        id: p.id,
        due: answeredAt + delay + late(),
        attempt: p.attempt + 1,
        offset: nextOffset++,
      });
    }
  }
  const seconds = ((arrivals.at(-1) ?? 0) - (arrivals[0] ?? 0)) / 1000;
  const limitSeconds = (options.events - options.burst) / options.rate;
  let overLimit = 0;
  for (let i = 0; i < arrivals.length; i++) {
    for (let j = i; j < arrivals.length; j++) {
      const allowed =
        options.burst + (options.rate * ((arrivals[j] as number) - (arrivals[i] as number))) / 1000;
      overLimit = Math.max(overLimit, j - i + 1 - allowed);
    }
  }
  return {
    delivered: arrivals.length,
    deadLettered,
    throttled,
    deferred,
    seconds,
    ofDeviceLimit: Math.round((limitSeconds / seconds) * 1000) / 1000,
    overLimit: Math.max(0, overLimit),
  };
}
