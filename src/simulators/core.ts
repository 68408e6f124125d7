import { defaultFaults, mergeFaults, type SimulatorFaults } from './faults.ts';
import {
  DEFAULT_BURST,
  DEFAULT_RATE,
  type RunningSimulator,
  type SimulatorLimits,
  type SimulatorOptions,
} from './simulator.ts';
import { type AcceptedRecord, emptyStats, type SimulatorStats, type ThrottleRecord } from './stats.ts';
import { TokenBucket } from './token-bucket.ts';

/**
 * The state both simulators share on their request path: the token bucket that stands for the provider's
 * own rate limit, the fault dice, the counters and the record of what they accepted. Everything here runs
 * per request, so it is kept to arithmetic and array pushes.
 */

/** What the request path decides before validation: throttle, inject a fault, or go on. */
export type Admission =
  | { kind: 'throttle'; retryAfterSeconds: number }
  | { kind: 'device-throttle' }
  | { kind: 'drop' }
  | { kind: 'error500' }
  | { kind: 'error503' }
  | { kind: 'proceed' };

/** The shared state of one simulator: bucket, faults, dice, counters and records. */
export class SimulatorCore {
  readonly stats: SimulatorStats = emptyStats();
  readonly keepPayloads: boolean;
  private bucket: TokenBucket;
  /** The per-device limit, when there is one; a bucket per device token seen (idle ones dropped). */
  private deviceLimit: { rate: number; burst: number } | undefined;
  private deviceBuckets = new Map<string, TokenBucket>();
  private throttleRecords: ThrottleRecord[] = [];
  private currentFaults: SimulatorFaults;
  private random: () => number;
  private readonly eventIds = new Set<string>();
  // Records as parallel arrays: cheaper to append at thousands per second than objects.
  private messageIds: string[] = [];
  private recordEventIds: Array<string | undefined> = [];
  private arrivals: number[] = [];
  /** When each request that took a token from the bucket arrived (accepted or not): the provider's usage. */
  private admittedAt: number[] = [];
  private payloads: unknown[] = [];

  constructor(options: SimulatorOptions) {
    this.bucket = new TokenBucket(
      options.rate ?? DEFAULT_RATE,
      options.burst ?? DEFAULT_BURST,
      performance.now(),
    );
    this.deviceLimit = deviceLimitOf(options.deviceRate, options.deviceBurst);
    this.currentFaults = mergeFaults(defaultFaults(), options.faults ?? {});
    this.random = seededRandom(options.seed ?? Math.floor(Math.random() * 2 ** 32));
    this.keepPayloads = options.keepPayloads === true;
  }

  get faults(): SimulatorFaults {
    return this.currentFaults;
  }

  setFaults(update: Partial<SimulatorFaults>): SimulatorFaults {
    this.currentFaults = mergeFaults(this.currentFaults, update);
    return this.currentFaults;
  }

  /**
   * The arrival time of a request: the wall clock, like the `createdAt` of events from other processes
   * (`performance.timeOrigin + performance.now()` has sub-millisecond steps but drifts from it by
   * milliseconds). The bucket runs on the monotonic clock.
   */
  now(): number {
    return Date.now();
  }

  /**
   * Counts the request and decides, in this order: storm, the device's bucket (when there is a
   * per-device limit and the request names a device token), the provider's bucket, dropped connection,
   * 500, 503. A request the provider's bucket refuses gives its device token back: a 429 counts against
   * nothing.
   */
  admit(deviceToken?: string): Admission {
    this.stats.requests += 1;
    const faults = this.currentFaults;
    const arrivedAt = this.now();
    if (faults.storm) {
      this.stats.throttled += 1;
      this.throttleRecords.push({ atMs: arrivedAt, scope: 'provider' });
      return { kind: 'throttle', retryAfterSeconds: faults.storm.retryAfterSeconds };
    }
    const now = performance.now();
    const device = deviceToken === undefined ? undefined : this.deviceBucket(deviceToken, now);
    if (device && device.take(now) > 0) {
      this.stats.deviceThrottled += 1;
      this.throttleRecords.push({ atMs: arrivedAt, scope: 'device' });
      return { kind: 'device-throttle' };
    }
    const wait = this.bucket.take(now);
    if (wait > 0) {
      device?.giveBack();
      this.stats.throttled += 1;
      this.throttleRecords.push({ atMs: arrivedAt, scope: 'provider' });
      return { kind: 'throttle', retryAfterSeconds: wait };
    }
    this.admittedAt.push(arrivedAt);
    if (faults.drop > 0 || faults.error500 > 0 || faults.error503 > 0) {
      const roll = this.random();
      if (roll < faults.drop) {
        this.stats.dropped += 1;
        return { kind: 'drop' };
      }
      if (roll < faults.drop + faults.error500) {
        this.stats.serverErrors += 1;
        return { kind: 'error500' };
      }
      if (roll < faults.drop + faults.error500 + faults.error503) {
        this.stats.serverErrors += 1;
        return { kind: 'error503' };
      }
    }
    return { kind: 'proceed' };
  }

  /** Milliseconds to hold this answer back (0: answer now). */
  delay(): number {
    const faults = this.currentFaults;
    if (faults.slow > 0 && this.random() < faults.slow) {
      this.stats.slowed += 1;
      return faults.slowMs;
    }
    return 0;
  }

  /** What a device token is: dead, malformed, or fine. */
  tokenState(token: string): 'dead' | 'bad' | 'ok' {
    const { deadTokenPrefix, badTokenPrefix } = this.currentFaults;
    if (deadTokenPrefix && token.startsWith(deadTokenPrefix)) return 'dead';
    if (badTokenPrefix && token.startsWith(badTokenPrefix)) return 'bad';
    return 'ok';
  }

  accept(messageId: string, eventId: string | undefined, arrivedAtMs: number, payload: unknown): void {
    this.stats.accepted += 1;
    if (eventId !== undefined) {
      if (this.eventIds.has(eventId)) this.stats.duplicates += 1;
      else {
        this.eventIds.add(eventId);
        this.stats.distinctEventIds += 1;
      }
    }
    this.messageIds.push(messageId);
    this.recordEventIds.push(eventId);
    this.arrivals.push(arrivedAtMs);
    if (this.keepPayloads) this.payloads.push(payload);
  }

  /** Arrival times (epoch ms) of every request that took a token, in order: accepted or failed after. */
  admissions(): number[] {
    return [...this.admittedAt];
  }

  /** Every 429 so far, in order. */
  throttles(): ThrottleRecord[] {
    return this.throttleRecords.map((record) => ({ ...record }));
  }

  /** The bucket of one device token, made on first sight; full idle ones are dropped to keep memory flat. */
  private deviceBucket(token: string, now: number): TokenBucket | undefined {
    const limit = this.deviceLimit;
    if (!limit) return undefined;
    let bucket = this.deviceBuckets.get(token);
    if (!bucket) {
      if (this.deviceBuckets.size >= 100_000) {
        for (const [key, idle] of this.deviceBuckets) {
          if (idle.available(now) >= idle.burst) this.deviceBuckets.delete(key);
        }
      }
      bucket = new TokenBucket(limit.rate, limit.burst, now);
      this.deviceBuckets.set(token, bucket);
    }
    return bucket;
  }

  records(): AcceptedRecord[] {
    return this.messageIds.map((messageId, i) => {
      const record: AcceptedRecord = {
        messageId,
        eventId: this.recordEventIds[i],
        arrivedAtMs: this.arrivals[i] as number,
      };
      if (this.keepPayloads) record.payload = this.payloads[i];
      return record;
    });
  }

  /**
   * Changes the provider's rate and burst from now on, keeping its bucket's level, records and counts: a
   * provider that turns slower (or recovers) while traffic flows.
   */
  setLimits(limits: { rate?: number; burst?: number }): void {
    const now = performance.now();
    this.bucket = this.bucket.retuned(
      limits.rate ?? this.bucket.rate,
      limits.burst ?? this.bucket.burst,
      now,
    );
  }

  /** Forgets records and counts and refills the buckets, optionally with new limits. */
  reset(limits: SimulatorLimits = {}): void {
    Object.assign(this.stats, emptyStats());
    this.eventIds.clear();
    this.messageIds = [];
    this.recordEventIds = [];
    this.arrivals = [];
    this.admittedAt = [];
    this.payloads = [];
    this.throttleRecords = [];
    this.deviceBuckets = new Map();
    if (limits.deviceRate === null) this.deviceLimit = undefined;
    else if (limits.deviceRate !== undefined || limits.deviceBurst !== undefined) {
      this.deviceLimit = deviceLimitOf(
        limits.deviceRate ?? this.deviceLimit?.rate,
        limits.deviceBurst ?? (limits.deviceRate === undefined ? this.deviceLimit?.burst : undefined),
      );
    }
    this.bucket = new TokenBucket(
      limits.rate ?? this.bucket.rate,
      limits.burst ?? this.bucket.burst,
      performance.now(),
    );
  }

  /** The /stats document: counts plus the limits and faults in force. */
  snapshot(kind: 'fcm' | 'apns'): Record<string, unknown> {
    return {
      simulator: kind,
      ...this.stats,
      rate: this.bucket.rate,
      burst: this.bucket.burst,
      deviceRate: this.deviceLimit?.rate ?? null,
      deviceBurst: this.deviceLimit?.burst ?? null,
      tokensAvailable: Math.floor(this.bucket.available(performance.now())),
      faults: this.currentFaults,
    };
  }
}

/** A per-device limit from its options (checked like the provider's bucket), or none. */
function deviceLimitOf(
  rate: number | undefined,
  burst: number | undefined,
): { rate: number; burst: number } | undefined {
  if (rate === undefined) {
    if (burst !== undefined) throw new RangeError('deviceBurst needs deviceRate');
    return undefined;
  }
  const limit = { rate, burst: burst ?? Math.max(1, rate) };
  new TokenBucket(limit.rate, limit.burst, 0); // throws a RangeError for a bad rate or burst
  return limit;
}

/** What a running simulator exposes of its core: the same for both providers. */
export type CoreControls = Pick<
  RunningSimulator,
  'stats' | 'records' | 'admissions' | 'throttles' | 'faults' | 'setFaults' | 'reset' | 'setLimits'
>;

/** The controls of {@link CoreControls} over `core`. */
export function coreControls(core: SimulatorCore): CoreControls {
  return {
    stats: () => ({ ...core.stats }),
    records: () => core.records(),
    admissions: () => core.admissions(),
    throttles: () => core.throttles(),
    faults: () => core.faults,
    setFaults: (update) => core.setFaults(update),
    reset: (limits) => core.reset(limits),
    setLimits: (limits) => core.setLimits(limits),
  };
}

/** Runs an answer now, or after the slow fault's delay when the dice say so. */
export function later(core: SimulatorCore, answer: () => void): void {
  const delay = core.delay();
  if (delay === 0) answer();
  // Unref'd: a held-back answer must not keep a closed simulator's process alive.
  else setTimeout(answer, delay).unref();
}

/** mulberry32: a tiny, fast, seedable generator; good enough for fault dice. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
