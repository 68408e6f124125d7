import type { RedisClient } from '../redis/client.ts';
import type { PoolBucket, TokenSource } from './token-pool.ts';

/** Options of {@link RestartSafeTokenSource}. */
export interface RestartSafeOptions {
  /** The Redis key that marks "this Redis still has Aqueduct's state" (no expiry). */
  markerKey: string;
  /** Told when Redis was found to have lost its data and the buckets were emptied. */
  onDataLoss?: (buckets: readonly string[]) => void;
}

/**
 * A token source that stays safe across a Redis that loses its data (a restart without persistence,
 * a failover to an empty replica). The limiter starts a bucket it does not find full, which is right
 * the first time but wrong after such a loss: the provider's own bucket may be empty right then (the
 * fleet was sending at its rate), and a full Aqueduct burst on top of it is a burst of 429s.
 *
 * So a marker key lives beside the buckets. After every (re)connect, before its next acquire, this
 * process sets it if missing (`SET NX`, one call per reconnect). Missing after this process had seen
 * it means the data is gone: every bucket this process draws from is emptied (its tokens taken and
 * dropped) before anything is sent, so the fleet restarts at the refill rate, without a burst. Several
 * processes may each empty the buckets after the same loss; that only holds back a little more.
 */
export class RestartSafeTokenSource implements TokenSource {
  private readonly inner: TokenSource;
  private readonly redis: RedisClient;
  private readonly options: RestartSafeOptions;
  private readonly buckets = new Map<string, PoolBucket>();
  private markerSeen = false;
  private needsCheck = true;
  private checking: Promise<void> | undefined;

  constructor(inner: TokenSource, redis: RedisClient, options: RestartSafeOptions) {
    this.inner = inner;
    this.redis = redis;
    this.options = options;
    redis.on('ready', () => {
      this.needsCheck = true;
    });
  }

  async acquire(
    buckets: PoolBucket[],
    n: number,
    options?: { waitFor?: number; holder?: string; held?: number; priority?: 'normal' | 'low' },
  ): Promise<{ granted: number; waitMs: number; tokensLeft?: number[] }> {
    for (const bucket of buckets) this.buckets.set(bucket.name, bucket);
    if (this.needsCheck) {
      // A failed check leaves the flag set; the acquire then meets the same outage and the limiter's
      // failure policy decides.
      if (!this.checking) {
        this.checking = this.check().finally(() => {
          this.checking = undefined;
        });
      }
      await this.checking.catch(() => {});
    }
    return this.inner.acquire(buckets, n, options);
  }

  blockUntil(buckets: PoolBucket[], retryAfterMs: number): Promise<unknown> {
    return this.inner.blockUntil(buckets, retryAfterMs);
  }

  refund(buckets: PoolBucket[], n: number, options?: { holder?: string; held?: number }): Promise<unknown> {
    return this.inner.refund(buckets, n, options);
  }

  private async check(): Promise<void> {
    const created = (await this.redis.set(this.options.markerKey, String(Date.now()), 'NX')) === 'OK';
    if (created && this.markerSeen) {
      const names = [...this.buckets.keys()];
      for (const bucket of this.buckets.values()) {
        await this.inner.acquire([bucket], Math.floor(bucket.capacity));
      }
      this.options.onDataLoss?.(names);
    }
    this.markerSeen = true;
    this.needsCheck = false;
  }
}
