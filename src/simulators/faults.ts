/** The faults a simulator injects on demand, and the checks on a change to them. */

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
