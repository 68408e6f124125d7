import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from '../redis/client.ts';
import { bucketTag } from './keys.ts';
import type { PoolBucket, TokenSource } from './token-pool.ts';

/** Options of {@link RestartSafeTokenSource}. */
export interface RestartSafeOptions {
  /**
   * The Redis key that marks "this Redis still has Aqueduct's state" (no expiry) for the buckets of one
   * hash tag: in their slot, so that on a Redis Cluster it is on the master that holds them.
   */
  markerKeyFor: (tag: string) => string;
  /** Told when Redis was found to have lost its data and the buckets were emptied. */
  onDataLoss?: (buckets: readonly string[]) => void;
}

/**
 * A token source that stays safe across a Redis that loses its data (a restart without persistence,
 * a failover to an empty replica). The limiter starts a bucket it does not find full, which is right
 * the first time but wrong after such a loss: the provider's own bucket may be empty right then (the
 * fleet was sending at its rate), and a full Aqueduct burst on top of it is a burst of 429s.
 *
 * So a marker key lives beside the buckets of each hash tag, in their slot. After every (re)connect
 * (on a Redis Cluster, of any node: one master may restart while the others keep their data), before
 * its next acquire from a tag, this process sets the tag's marker if missing (`SET NX`, one call per
 * tag per reconnect). Missing after this process had seen it means that tag's data is gone: every
 * bucket of it this process draws from is emptied (its tokens taken and dropped) before anything is
 * sent, so the fleet restarts at the refill rate, without a burst. Several processes may each empty
 * the buckets after the same loss; that only holds back a little more.
 */
export class RestartSafeTokenSource implements TokenSource {
  private readonly inner: TokenSource;
  private readonly redis: RedisClient;
  private readonly options: RestartSafeOptions;
  private readonly buckets = new Map<string, PoolBucket>();
  /** The tags whose marker this process has seen (set or found). */
  private readonly seen = new Set<string>();
  /** The tags checked since the last (re)connect. */
  private readonly checked = new Set<string>();
  private checking: Promise<void> | undefined;

  constructor(inner: TokenSource, redis: RedisClient, options: RestartSafeOptions) {
    this.inner = inner;
    this.redis = redis;
    this.options = options;
    // Whatever a connection comes back to is checked again: cleared as soon as one is lost, so that no
    // acquire goes out between the reconnect and the word of it.
    const connectionLost = () => this.checked.clear();
    redis.on('close', connectionLost);
    redis.on('ready', connectionLost);
    if (redis instanceof Cluster) {
      // A Cluster client says `close` and `ready` once for all its nodes; a node's own connection is
      // dropped from it (`-node`) when it is lost.
      redis.on('-node', connectionLost);
      const watch = (node: Redis) => node.on('close', connectionLost);
      for (const node of redis.nodes()) watch(node);
      redis.on('+node', watch);
    }
  }

  async acquire(
    buckets: PoolBucket[],
    n: number,
    options?: { waitFor?: number; holder?: string; held?: number; priority?: 'normal' | 'low' },
  ): Promise<{ granted: number; waitMs: number; tokensLeft?: number[] }> {
    for (const bucket of buckets) this.buckets.set(bucket.name, bucket);
    // A failed check leaves its tag unchecked; the acquire then meets the same outage and the
    // limiter's failure policy decides.
    while (buckets.some((bucket) => !this.checked.has(bucketTag(bucket.name)))) {
      this.checking ??= this.check().finally(() => {
        this.checking = undefined;
      });
      const ok = await this.checking.then(
        () => true,
        () => false,
      );
      if (!ok) break;
    }
    return this.inner.acquire(buckets, n, options);
  }

  blockUntil(buckets: PoolBucket[], retryAfterMs: number): Promise<unknown> {
    return this.inner.blockUntil(buckets, retryAfterMs);
  }

  refund(buckets: PoolBucket[], n: number, options?: { holder?: string; held?: number }): Promise<unknown> {
    return this.inner.refund(buckets, n, options);
  }

  /** Checks the marker of every tag drawn from that is not checked since the last (re)connect. */
  private async check(): Promise<void> {
    const tags = new Set([...this.buckets.keys()].map(bucketTag));
    for (const tag of tags) {
      if (this.checked.has(tag)) continue;
      const created =
        (await this.redis.set(this.options.markerKeyFor(tag), String(Date.now()), 'NX')) === 'OK';
      if (created && this.seen.has(tag)) {
        const lost = [...this.buckets.values()].filter((bucket) => bucketTag(bucket.name) === tag);
        for (const bucket of lost) await this.inner.acquire([bucket], Math.floor(bucket.capacity));
        this.options.onDataLoss?.(lost.map((bucket) => bucket.name));
      }
      this.seen.add(tag);
      this.checked.add(tag);
    }
  }
}
