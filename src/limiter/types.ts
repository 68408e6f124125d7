import type { LimiterUnavailableError } from './errors.ts';

/** One token bucket a call draws from. */
export interface BucketSpec {
  /**
   * `<tag>` or `<tag>:<rest>`, e.g. `fcm` or `fcm:tenant:acme`. All buckets of one call must share the
   * tag (the part before the first ':'): it is the Redis Cluster hash tag of their keys.
   */
  name: string;
  /** Refill rate in tokens per second; finite and > 0, may be fractional (0.5 = one token every 2 s). */
  rate: number;
  /** Most tokens the bucket holds (the largest burst); finite and >= 1. A new bucket starts full. */
  capacity: number;
}

/** Options of {@link TokenBucketLimiter.acquire}. */
export interface AcquireOptions {
  /**
   * How many tokens the returned `waitMs` is for. Default: the part of `n` that was not granted. Clamped
   * to the smallest capacity (more could never be available at once), and, for a `holder` granted less
   * than `n`, to the part of `n` not granted: its turn (see `holder`) is for no more than it still lacks.
   */
  waitFor?: number;
  /**
   * Who asks: a name unique to one holder of tokens (a consumer's token pool). With it, the provider's
   * bucket (the first of `buckets`) records `held + granted` as the tokens this holder holds that the
   * provider has not answered yet, and refills only up to its capacity minus what all holders hold (see
   * lua/includes/provider-bucket.lua). Without it the call holds nothing.
   */
  holder?: string;
  /** With `holder`: tokens it holds besides this call's grant (granted before, not yet answered). Default 0. */
  held?: number;
  /**
   * `'normal'` (default) or `'low'`. A low-priority call may take only the tokens of the provider's
   * bucket (the first of `buckets`) above a reserve kept for normal calls, and its `waitMs` is for
   * `waitFor` tokens above it: the reserve is a quarter second of what normal calls are being granted
   * (an average over about a second), at most half the capacity, and 0 when no normal call is granted
   * anything, so the low class then has the whole budget. A normal call's `waitMs` does not wait for
   * the turns of low-priority holders. For reading back the events of tenants over their fair share,
   * beside the trickle of the others (see lua/includes/provider-bucket.lua).
   */
  priority?: AcquirePriority;
}

/** The class of an acquire (see {@link AcquireOptions.priority}). */
export type AcquirePriority = 'normal' | 'low';

/** Options of {@link TokenBucketLimiter.refund}. */
export interface RefundOptions {
  /** Who gives the tokens back (see {@link AcquireOptions.holder}). */
  holder?: string;
  /** With `holder`: what it still holds after this refund; 0 removes its entry. Default 0. */
  held?: number;
}

/** One request of {@link TokenBucketLimiter.acquireMany}. */
export interface AcquireRequest extends AcquireOptions {
  buckets: BucketSpec[];
  n: number;
}

/** The answer to an acquire. */
export interface AcquireResult {
  /** Tokens granted: min(n, whole tokens of every bucket), deducted from every bucket atomically. */
  granted: number;
  /**
   * Milliseconds until `waitFor` more tokens are available in all buckets and no block is active; 0 when
   * nothing remains to wait for. Rounded up, plus `timerSlackMs`, so a plain `setTimeout(…, waitMs)` is
   * long enough (see {@link LimiterOptions.timerSlackMs}).
   */
  waitMs: number;
  /** Tokens left in each bucket (in the order given), fractions preserved. NaN when failed open. */
  tokensLeft: number[];
  /** Epoch ms (Redis clock) of the latest active block-until among the buckets, or null. */
  blockedUntilMs: number | null;
  /** The Redis server time of the decision, µs since the epoch (NaN when failed open). */
  serverTimeUs: number;
  /** True when Redis failed and `failurePolicy: 'open'` granted all of `n` without asking it. */
  failedOpen: boolean;
}

/** The answer to a refund. */
export interface RefundResult {
  /** Tokens in each bucket after the refund (in the order given), fractions preserved. */
  tokensLeft: number[];
  /** The Redis server time of the refund, µs since the epoch. */
  serverTimeUs: number;
}

/** A bucket as `aqueduct inspect` shows it. */
export interface BucketState {
  name: string;
  key: string;
  /**
   * Tokens now: the stored level refilled to the Redis server's current time. Null for a bucket that
   * holds only a block (blocked before it was ever used: its rate and capacity are not known yet).
   */
  tokens: number | null;
  /** Rate and capacity as last given by an acquire or refund (null as for `tokens`). */
  rate: number | null;
  capacity: number | null;
  /** Epoch ms of an active block-until, or null. */
  blockedUntilMs: number | null;
  /** Time to live in ms (null: no expiry, which the limiter never leaves behind). */
  ttlMs: number | null;
  /**
   * Tokens granted to the consumers' pools that the provider has not answered yet, as they last reported
   * them: the bucket refills only up to `capacity - held` (see lua/includes/provider-bucket.lua).
   */
  held: number;
  /** The share of `rate` the bucket refills at now: below 1 for a while after the provider throttled the project. */
  rateFactor: number;
  /** The Redis server time the state was computed at, epoch ms. */
  serverTimeMs: number;
}

/** What to do when Redis cannot be asked. */
export type FailurePolicy = 'closed' | 'open';

/** Options of {@link TokenBucketLimiter}. */
export interface LimiterOptions {
  /**
   * First segment of every key (default `aqueduct`): keys are `<keyPrefix>:{<tag>}:bucket[:<rest>]`. Use
   * this rather than ioredis' own `keyPrefix` option, which SCAN (and so `inspect`) does not apply.
   */
  keyPrefix?: string;
  /**
   * When Redis fails or times out during an acquire:
   * - `'closed'` (default): throw {@link LimiterUnavailableError}; the caller pauses and retries later.
   *   Nothing is sent that the limit did not allow.
   * - `'open'`: grant all of `n` (`failedOpen: true`, `onFailOpen` is called) so delivery continues.
   *   RISK: while Redis is down there is no limit at all; every instance sends as fast as it can and the
   *   provider may throttle or suspend the sender. Pick it only when late pushes cost more than that.
   * Refund, blockUntil and inspect always throw {@link LimiterUnavailableError}.
   */
  failurePolicy?: FailurePolicy;
  /** Shortest TTL of a bucket key in seconds (default 60); see the TTL rule in `lua/acquire.lua`. */
  minTtlSeconds?: number;
  /**
   * A call that Redis has not answered after this many ms fails with {@link LimiterUnavailableError}
   * (default 1000; 0 waits as long as the ioredis client does). The script may still run later; tokens it
   * then takes are lost until they refill, which errs on the side of sending less.
   */
  timeoutMs?: number;
  /**
   * Added to every non-zero `waitMs` (default 1). Node timers count whole milliseconds from a clock read
   * at the start of the event-loop turn, so `setTimeout(f, w)` may run up to 1 ms before `w` ms have
   * really passed since the reply arrived; without the slack a caller that sleeps exactly `waitMs` would
   * come back a fraction of a token short.
   */
  timerSlackMs?: number;
  /**
   * Longest block `blockUntil` sets, in ms from Redis' now (default 60 000): a longer `retryAfterMs` is
   * cut to it, and so is a block stored further out. At most 2^31 - 1 (a Node timer's limit).
   */
  maxBlockMs?: number;
  /**
   * How long a holder's report of the tokens it holds counts without a newer one, in ms (default 60 000):
   * a consumer that crashed stops holding back the bucket's refill after this.
   */
  holderLeaseMs?: number;
  /** How a project-wide throttle slows the provider's bucket down (see {@link AdaptiveRateOptions}). */
  adaptiveRate?: AdaptiveRateOptions;
  /** Called with the error each time `failurePolicy: 'open'` turns a Redis failure into a full grant. */
  onFailOpen?: (error: LimiterUnavailableError) => void;
}

/**
 * What `blockUntil` does to the rate of the provider's bucket (the first bucket it is given): a
 * project-wide 429 says the provider is slower than configured, so besides the block the bucket refills
 * at `cut` times the rate it refilled at (at most one cut a second), holds that for `holdMs`, then climbs
 * back by `recoveryPerSecond` of the rate per second until it is whole again. The defaults stop the 429s
 * of a provider 10 % slower than configured after one cut and regain the full rate 17.5 s after the last.
 */
export interface AdaptiveRateOptions {
  /** The share of its rate a throttled bucket keeps, in (0, 1]; 1 turns adaptation off. Default 0.85. */
  cut?: number;
  /** How long a cut rate holds before it climbs back, in ms. Default 10 000. */
  holdMs?: number;
  /** The share of the configured rate regained per second after the hold. Default 0.02. */
  recoveryPerSecond?: number;
}
