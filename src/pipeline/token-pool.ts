/**
 * One process's share of a token bucket group (a provider's bucket, plus a tenant's when the event has
 * one). All partitions of the process draw from it, so that however many partitions are throttled,
 * the process makes ONE Redis call per refill for their combined demand, and sleeps once for all of
 * them. That is what keeps Redis traffic near one call per hundred pushes at saturation.
 *
 * - `take(n)` answers at once from tokens the process already holds; otherwise the takes of the same
 *   tick are coalesced into one acquire for their total.
 * - When the bucket is short, the pool is "dry" until the time the limiter named; takes during that
 *   time get nothing and make no Redis call (no busy polling). Partitions that got too little register
 *   a wake-up with `whenRefilled`, pause, and are resumed when the pool has refilled.
 */

/** The bucket(s) a pool draws from, as the limiter names them. */
export interface PoolBucket {
  name: string;
  rate: number;
  capacity: number;
}

/** What a pool needs from the limiter (src/limiter implements it over Redis). */
export interface TokenSource {
  acquire(
    buckets: PoolBucket[],
    n: number,
    options?: { waitFor?: number },
  ): Promise<{ granted: number; waitMs: number; tokensLeft?: number[] }>;
  /** Blocks the buckets fleet-wide for `retryAfterMs` from now (a provider's 429). */
  blockUntil(buckets: PoolBucket[], retryAfterMs: number): Promise<unknown>;
  refund(buckets: PoolBucket[], n: number): Promise<unknown>;
}

/** Options of {@link TokenPool}. */
export interface TokenPoolOptions {
  /** When throttled, wait until this many tokens can be had before asking again. */
  chunk: number;
  /**
   * Largest number of tokens asked for in one call. Default: two chunks. A process that took a whole
   * burst at once would send it through its bounded connection pool over hundreds of milliseconds while
   * the other processes send theirs at once; the provider would then see more than the bucket granted
   * in some window. Small takes keep the delay between a grant and its send short and even.
   */
  maxRequest?: number;
  /** Back-off after the limiter failed (Redis unreachable, fail-closed). Default 1000 ms. */
  failureBackoffMs?: number;
  /** Told about limiter failures (for logs and metrics). */
  onError?: (error: unknown) => void;
  /** Told about every acquire: requested, granted, wait. */
  onAcquire?: (event: { requested: number; granted: number; waitMs: number; tokensLeft?: number }) => void;
}

interface PendingTake {
  n: number;
  resolve: (granted: number) => void;
}

export class TokenPool {
  readonly buckets: PoolBucket[];
  private readonly source: TokenSource;
  private readonly options: Required<Omit<TokenPoolOptions, 'onError' | 'onAcquire'>> &
    Pick<TokenPoolOptions, 'onError' | 'onAcquire'>;
  /** Tokens taken from Redis and not yet handed to a partition. */
  private credit = 0;
  private dryUntil = 0;
  private blockedUntil = 0;
  private pending: PendingTake[] = [];
  private drainScheduled = false;
  private readonly waiters = new Map<string, { need: number; wake: () => void }>();
  private wakeTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(source: TokenSource, buckets: PoolBucket[], options: TokenPoolOptions) {
    this.source = source;
    this.buckets = buckets;
    const smallestCapacity = Math.min(...buckets.map((b) => b.capacity));
    const chunk = Math.max(1, Math.min(options.chunk, smallestCapacity));
    this.options = {
      failureBackoffMs: 1000,
      ...options,
      chunk,
      maxRequest: Math.min(options.maxRequest ?? chunk * 2, smallestCapacity),
    };
  }

  /** Epoch ms until which the pool expects nothing (0 when not dry). */
  get dryUntilMs(): number {
    return this.dryUntil;
  }

  /** Up to `n` tokens: at once from credit, else from one coalesced acquire; 0 while dry. */
  take(n: number): Promise<number> {
    if (n <= 0 || this.closed) return Promise.resolve(0);
    if (this.credit >= n) {
      this.credit -= n;
      return Promise.resolve(n);
    }
    return new Promise((resolve) => {
      this.pending.push({ n, resolve });
      if (!this.drainScheduled) {
        this.drainScheduled = true;
        setImmediate(() => void this.drain());
      }
    });
  }

  /**
   * Calls `wake` once, when the pool has refilled enough to serve some of `need` (the partition then
   * resumes and takes). A later registration under the same key replaces the earlier one.
   */
  whenRefilled(key: string, need: number, wake: () => void): number {
    this.waiters.set(key, { need, wake });
    const at = Math.max(this.dryUntil, Date.now());
    this.armWakeTimer(at);
    return at;
  }

  /** Forgets a waiter (its partition was revoked or is shutting down). */
  cancel(key: string): void {
    this.waiters.delete(key);
    if (this.waiters.size === 0 && this.wakeTimer) {
      clearTimeout(this.wakeTimer);
      this.wakeTimer = undefined;
    }
  }

  /** Epoch ms until which this process last blocked the fleet (0: never). */
  get blockedUntilMs(): number {
    return this.blockedUntil;
  }

  /** The provider said "too many requests, retry after…": stop the whole fleet until then. */
  async block(untilEpochMs: number): Promise<void> {
    this.blockedUntil = Math.max(this.blockedUntil, untilEpochMs);
    this.dryUntil = Math.max(this.dryUntil, untilEpochMs);
    this.credit = 0;
    await this.source.blockUntil(this.buckets, Math.max(1, untilEpochMs - Date.now()));
  }

  /** Gives held tokens back to Redis (on shutdown) so that other instances can use them. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.waiters.clear();
    for (const take of this.pending.splice(0)) take.resolve(0);
    const held = this.credit;
    this.credit = 0;
    if (held > 0) await this.source.refund(this.buckets, held).catch(() => {});
  }

  private async drain(): Promise<void> {
    this.drainScheduled = false;
    const takes = this.pending.splice(0);
    const wanted = takes.reduce((sum, t) => sum + t.n, 0);
    await this.refill(wanted);
    for (const take of takes) {
      const share = Math.min(take.n, this.credit);
      this.credit -= share;
      take.resolve(share);
    }
  }

  /** One acquire for `wanted` minus what is held, unless dry. */
  private async refill(wanted: number): Promise<void> {
    const missing = Math.min(wanted - this.credit, this.options.maxRequest);
    if (missing <= 0 || this.closed || Date.now() < this.dryUntil) return;
    try {
      const result = await this.source.acquire(this.buckets, missing, {
        waitFor: Math.min(missing, this.options.chunk),
      });
      this.credit += result.granted;
      if (result.granted < missing) this.dryUntil = Date.now() + Math.max(1, result.waitMs);
      this.options.onAcquire?.({
        requested: missing,
        granted: result.granted,
        waitMs: result.waitMs,
        ...(result.tokensLeft?.[0] !== undefined ? { tokensLeft: result.tokensLeft[0] } : {}),
      });
    } catch (error) {
      // Fail closed: nothing is sent unmetered; everyone waits and asks again after the back-off.
      this.dryUntil = Date.now() + this.options.failureBackoffMs;
      this.options.onError?.(error);
    }
  }

  private armWakeTimer(at: number): void {
    if (this.wakeTimer || this.closed) return;
    this.wakeTimer = setTimeout(() => this.wakeWaiters(), Math.max(0, at - Date.now()));
  }

  /**
   * Wakes every waiting partition once the dry spell is over. The tokens are not taken here but by the
   * partitions themselves, right before they send: a token taken early and spent late would let sends
   * bunch up at the provider beyond what the bucket allowed. The woken partitions are fetched in one
   * response, so their takes still coalesce into one Redis call.
   */
  private wakeWaiters(): void {
    this.wakeTimer = undefined;
    if (this.closed || this.waiters.size === 0) return;
    if (Date.now() < this.dryUntil) {
      this.armWakeTimer(this.dryUntil);
      return;
    }
    const waiters = [...this.waiters.values()];
    this.waiters.clear();
    for (const waiter of waiters) waiter.wake();
  }
}
