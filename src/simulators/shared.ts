/**
 * What both simulators share: the token bucket that stands for the provider's own rate limit, the faults
 * they inject, and the record of what they accepted. Everything here is on the request path, so it is
 * kept to arithmetic and array pushes.
 */

/** Options every simulator takes. */
export interface SimulatorOptions {
  /** Interface to listen on. Default 127.0.0.1 (the CLI listens on 0.0.0.0). */
  host?: string;
  /** Port to listen on; 0 (the default) picks a free one. */
  port?: number;
  /** Sustained requests per second the simulated provider allows (token refill rate). Default 800. */
  rate?: number;
  /** Requests it allows at once after a quiet spell (bucket size). Default 2000. */
  burst?: number;
  /** Faults to inject from the start; `setFaults` changes them at run time. */
  faults?: Partial<SimulatorFaults>;
  /** Check credentials instead of accepting any well-formed one. */
  verifyAuth?: boolean;
  /** Extra names (or IPs) for the TLS certificate, besides localhost, 127.0.0.1, ::1 and this host's name. */
  certHosts?: string[];
  /** Keep each accepted request's payload in its record (tests); off by default to keep memory flat. */
  keepPayloads?: boolean;
  /** Seed of the fault dice, for a run that can be replayed. Default: random. */
  seed?: number;
}

export const DEFAULT_RATE = 800;
export const DEFAULT_BURST = 2000;
/** Tokens that start with this are dead (FCM 404 UNREGISTERED, APNs 410 Unregistered) unless configured otherwise. */
export const DEFAULT_DEAD_TOKEN_PREFIX = 'dead-';
/** Tokens that start with this are malformed (FCM 400 INVALID_ARGUMENT, APNs 400 BadDeviceToken). */
export const DEFAULT_BAD_TOKEN_PREFIX = 'bad-';

/** Faults on demand. Shares are probabilities per request (0..1), drawn independently of each other. */
export interface SimulatorFaults {
  /** Share of requests answered 500 (FCM INTERNAL, APNs InternalServerError). */
  error500: number;
  /** Share of requests answered 503 (FCM UNAVAILABLE, APNs ServiceUnavailable). */
  error503: number;
  /** Share of requests dropped without an answer: FCM closes the connection, APNs resets the stream. */
  drop: number;
  /** Share of requests answered only after `slowMs`. */
  slow: number;
  /** Delay of a slow answer, in milliseconds. */
  slowMs: number;
  /** Device tokens with this prefix are dead; empty disables. */
  deadTokenPrefix: string;
  /** Device tokens with this prefix are malformed; empty disables. */
  badTokenPrefix: string;
  /**
   * A 429 storm: while set, every request is answered 429 with this Retry-After (seconds), whatever the
   * bucket holds. `null` ends it.
   */
  storm: { retryAfterSeconds: number } | null;
}

export function defaultFaults(): SimulatorFaults {
  return {
    error500: 0,
    error503: 0,
    drop: 0,
    slow: 0,
    slowMs: 1000,
    deadTokenPrefix: DEFAULT_DEAD_TOKEN_PREFIX,
    badTokenPrefix: DEFAULT_BAD_TOKEN_PREFIX,
    storm: null,
  };
}

/** Merges a partial update into faults, checking each value (the control endpoint takes JSON from anyone). */
export function mergeFaults(current: SimulatorFaults, update: Partial<SimulatorFaults>): SimulatorFaults {
  const next = { ...current };
  for (const key of ['error500', 'error503', 'drop', 'slow'] as const) {
    const value = update[key];
    if (value === undefined) continue;
    if (typeof value !== 'number' || !(value >= 0 && value <= 1))
      throw new RangeError(`${key} must be a share between 0 and 1`);
    next[key] = value;
  }
  if (update.slowMs !== undefined) {
    if (typeof update.slowMs !== 'number' || !(update.slowMs >= 0))
      throw new RangeError('slowMs must be >= 0');
    next.slowMs = update.slowMs;
  }
  for (const key of ['deadTokenPrefix', 'badTokenPrefix'] as const) {
    const value = update[key];
    if (value === undefined) continue;
    if (typeof value !== 'string') throw new RangeError(`${key} must be a string`);
    next[key] = value;
  }
  if (update.storm !== undefined) {
    const storm = update.storm;
    if (storm !== null && !(typeof storm?.retryAfterSeconds === 'number' && storm.retryAfterSeconds >= 0)) {
      throw new RangeError('storm must be null or { retryAfterSeconds: number }');
    }
    next.storm = storm === null ? null : { retryAfterSeconds: Math.ceil(storm.retryAfterSeconds) };
  }
  return next;
}

/**
 * A token bucket with continuous refill: `burst` tokens at most, `rate` tokens per second. Each request
 * takes one token; with less than one token left it is refused and told how long until one is there.
 */
export class TokenBucket {
  readonly rate: number;
  readonly burst: number;
  private tokens: number;
  private lastMs: number;

  constructor(rate: number, burst: number, nowMs: number) {
    if (!(rate > 0) || !Number.isFinite(rate))
      throw new RangeError(`rate must be a positive number, got ${rate}`);
    if (!(burst >= 1) || !Number.isFinite(burst))
      throw new RangeError(`burst must be at least 1, got ${burst}`);
    this.rate = rate;
    this.burst = burst;
    this.tokens = burst;
    this.lastMs = nowMs;
  }

  /** Takes one token: 0 when granted, else the seconds to wait (whole, at least 1: Retry-After's unit). */
  take(nowMs: number): number {
    if (nowMs > this.lastMs) {
      this.tokens = Math.min(this.burst, this.tokens + ((nowMs - this.lastMs) * this.rate) / 1000);
      this.lastMs = nowMs;
    }
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - this.tokens) / this.rate));
  }

  /** Tokens available at `nowMs` (for /stats). */
  available(nowMs: number): number {
    const elapsed = Math.max(0, nowMs - this.lastMs);
    return Math.min(this.burst, this.tokens + (elapsed * this.rate) / 1000);
  }
}

/** Counts served on /stats. Every request lands in exactly one of the outcome counters. */
export interface SimulatorStats {
  /** Requests that reached the push endpoint. */
  requests: number;
  /** Notifications accepted (200), duplicates included. */
  accepted: number;
  /** Distinct event ids among the accepted (read from the data payload). */
  distinctEventIds: number;
  /** Accepted notifications whose event id had been accepted before. */
  duplicates: number;
  /** Answered 429 (bucket empty or storm). */
  throttled: number;
  /** Answered 500 or 503 (injected). */
  serverErrors: number;
  /** Dead or malformed device tokens (FCM 404/400, APNs 410/400). */
  invalidTokens: number;
  /** Refused as invalid (payload too large, missing fields, bad headers). */
  rejected: number;
  /** Refused for credentials (missing, malformed, or failing verification). */
  authFailures: number;
  /** Connections dropped without an answer (injected). */
  dropped: number;
  /** Answers delayed by the slow fault. */
  slowed: number;
}

/** One accepted notification. */
export interface AcceptedRecord {
  /** The id the simulator answered with (FCM `projects/…/messages/…`, APNs `apns-id`). */
  messageId: string;
  /** The event id found in the data payload under `aqueduct_id`, if any. */
  eventId: string | undefined;
  /** When the request arrived, in epoch milliseconds (Date.now()). */
  arrivedAtMs: number;
  /** The request as received (with `keepPayloads`). */
  payload?: unknown;
}

const emptyStats = (): SimulatorStats => ({
  requests: 0,
  accepted: 0,
  distinctEventIds: 0,
  duplicates: 0,
  throttled: 0,
  serverErrors: 0,
  invalidTokens: 0,
  rejected: 0,
  authFailures: 0,
  dropped: 0,
  slowed: 0,
});

/** What the request path decides before validation: throttle, inject a fault, or go on. */
export type Admission =
  | { kind: 'throttle'; retryAfterSeconds: number }
  | { kind: 'drop' }
  | { kind: 'error500' }
  | { kind: 'error503' }
  | { kind: 'proceed' };

/** The shared state of one simulator: bucket, faults, dice, counters and records. */
export class SimulatorCore {
  readonly stats: SimulatorStats = emptyStats();
  readonly keepPayloads: boolean;
  private bucket: TokenBucket;
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

  /** Counts the request and decides, in this order: storm, bucket, dropped connection, 500, 503. */
  admit(): Admission {
    this.stats.requests += 1;
    const faults = this.currentFaults;
    if (faults.storm) {
      this.stats.throttled += 1;
      return { kind: 'throttle', retryAfterSeconds: faults.storm.retryAfterSeconds };
    }
    const wait = this.bucket.take(performance.now());
    if (wait > 0) {
      this.stats.throttled += 1;
      return { kind: 'throttle', retryAfterSeconds: wait };
    }
    this.admittedAt.push(this.now());
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

  /** Forgets records and counts and refills the bucket, optionally with a new rate and burst. */
  reset(limits: { rate?: number; burst?: number } = {}): void {
    Object.assign(this.stats, emptyStats());
    this.eventIds.clear();
    this.messageIds = [];
    this.recordEventIds = [];
    this.arrivals = [];
    this.admittedAt = [];
    this.payloads = [];
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
      tokensAvailable: Math.floor(this.bucket.available(performance.now())),
      faults: this.currentFaults,
    };
  }
}

/** A running simulator, in-process. */
export interface RunningSimulator {
  readonly kind: 'fcm' | 'apns';
  /** `https://host:port`: the endpoint override (FCM_ENDPOINT / APNS_ENDPOINT). */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The self-signed certificate clients must trust (FCM_CA_FILE / APNS_CA_FILE contents). */
  readonly caPem: string;
  /** Where GET /stats answers. */
  readonly statsUrl: string;
  /** Counts so far (a copy). */
  stats(): SimulatorStats;
  /** Every accepted notification so far, in arrival order. */
  records(): AcceptedRecord[];
  /** Arrival times (epoch ms) of every request that took a token from the bucket, accepted or not. */
  admissions(): number[];
  /** The faults in force. */
  faults(): SimulatorFaults;
  /** Changes some faults (the others stay); returns the faults now in force. */
  setFaults(update: Partial<SimulatorFaults>): SimulatorFaults;
  /** Forgets counts and records and refills the bucket (optionally with a new rate and burst). */
  reset(limits?: { rate?: number; burst?: number }): void;
  /** The environment that points Aqueduct here, given where the certificate was written. */
  env(caFile: string): Record<string, string>;
  close(): Promise<void>;
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

/**
 * The control API both simulators serve next to /stats: `GET /stats`, `POST /faults` (a JSON subset
 * of {@link SimulatorFaults}), `POST /reset` (optional `{ rate, burst }`). Returns undefined for other paths.
 */
export function handleControl(
  core: SimulatorCore,
  kind: 'fcm' | 'apns',
  method: string,
  path: string,
  body: string,
): { status: number; json: unknown } | undefined {
  const route = path.split('?')[0];
  try {
    if (route === '/stats' && method === 'GET') return { status: 200, json: core.snapshot(kind) };
    if (route === '/faults' && method === 'POST')
      return { status: 200, json: core.setFaults(parseObject(body)) };
    if (route === '/reset' && method === 'POST') {
      const limits = parseObject(body) as { rate?: number; burst?: number };
      core.reset(limits);
      return { status: 200, json: core.snapshot(kind) };
    }
  } catch (error) {
    return { status: 400, json: { error: (error as Error).message } };
  }
  return undefined;
}

function parseObject(body: string): Record<string, unknown> {
  if (body.trim() === '') return {};
  const value: unknown = JSON.parse(body);
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new TypeError('expected a JSON object');
  return value as Record<string, unknown>;
}

/** The stats counters that changed between two snapshots, as one log line. */
export function summaryLine(kind: 'fcm' | 'apns', previous: SimulatorStats, current: SimulatorStats): string {
  const delta = (key: keyof SimulatorStats) => current[key] - previous[key];
  const errors = delta('serverErrors') + delta('dropped');
  const time = new Date().toISOString().slice(11, 19);
  return (
    `${kind}-sim ${time} accepted ${delta('accepted')}/s (total ${current.accepted}) · 429s ${delta('throttled')}` +
    ` · errors ${errors} (5xx ${delta('serverErrors')}, dropped ${delta('dropped')})` +
    ` · invalid tokens ${delta('invalidTokens')} · rejected ${delta('rejected')} · duplicates ${current.duplicates}`
  );
}
