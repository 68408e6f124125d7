import { Cluster } from 'ioredis';
import type { RedisClient } from './client.ts';

/**
 * Whether Redis can serve the keys a process uses, for its readiness. A single Redis's client status
 * says so. A Cluster client's does not: it stays `ready` while a master is down or the cluster is in
 * `cluster_state:fail`, so on a Cluster the keys of each hash tag in use (one key per tag, on whatever
 * master holds its slot) are read every `everyMs`, and a read that fails or does not answer within
 * `everyMs` makes it not ready until one answers again.
 */
export class RedisReachability {
  private readonly redis: RedisClient;
  private readonly keys: readonly string[];
  private readonly everyMs: number;
  private reachable = true;
  private timer: NodeJS.Timeout | undefined;

  /** `keys`: one key per hash tag the process uses (read with EXISTS; they need not exist). */
  constructor(redis: RedisClient, keys: readonly string[], everyMs = 2000) {
    this.redis = redis;
    this.keys = keys;
    this.everyMs = everyMs;
    if (redis instanceof Cluster && keys.length > 0) this.schedule();
  }

  get ok(): boolean {
    return this.redis.status === 'ready' && this.reachable;
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer = setTimeout(() => void this.probe(), this.everyMs);
    this.timer.unref();
  }

  private async probe(): Promise<void> {
    let limit: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      limit = setTimeout(() => reject(new Error('no answer')), this.everyMs);
    });
    try {
      await Promise.race([Promise.all(this.keys.map((key) => this.redis.exists(key))), late]);
      this.reachable = true;
    } catch {
      this.reachable = false;
    } finally {
      clearTimeout(limit);
      if (this.timer) this.schedule();
    }
  }
}
