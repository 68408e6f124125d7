/**
 * The consumer's token pools by bucket group (`fcm`, `fcm:tenant:acme`, …), bounded: tenant names come
 * from whatever producers write, so a map that only grows would hold one pool per tenant ever seen. A
 * pool nobody asked for within `idleMs`, and whose dry spell (if any) ended as long ago, is closed and
 * dropped: closing refunds the tokens it held to Redis, and a later event of that group gets a fresh pool.
 *
 * Why both conditions make a pool safe to drop: a partition waiting for a pool's refill is woken when the
 * pool's dry spell ends and then asks for the pool again, so a pool idle that long past its dry spell has
 * no partition waiting on it and no send that could still be in flight.
 */

/** What the map needs of a pool (the limiter's TokenPool has both). */
export interface ClosablePool {
  /** Epoch ms until which the pool expects nothing (0 when not dry). */
  readonly dryUntilMs: number;
  /** Gives the tokens it holds back to Redis and stops serving. */
  close(): Promise<void>;
}

/** Options of {@link TenantPools}. */
export interface TenantPoolsOptions {
  /** A pool unused for this long (and not dry within it) is closed and dropped. Default 5 minutes. */
  idleMs?: number;
  /** The clock (tests). Default `Date.now`. */
  now?: () => number;
}

export class TenantPools<P extends ClosablePool> {
  private readonly pools = new Map<string, { pool: P; lastUsed: number }>();
  private readonly idleMs: number;
  private readonly now: () => number;
  private lastSweep: number;

  constructor(options: TenantPoolsOptions = {}) {
    this.idleMs = options.idleMs ?? 5 * 60_000;
    this.now = options.now ?? Date.now;
    this.lastSweep = this.now();
  }

  /** The pool of `key`, made by `create` when there is none; idle ones are swept now and then. */
  get(key: string, create: () => P): P {
    const now = this.now();
    if (now - this.lastSweep >= this.idleMs / 4) void this.sweep();
    let entry = this.pools.get(key);
    if (!entry) {
      entry = { pool: create(), lastUsed: now };
      this.pools.set(key, entry);
    }
    entry.lastUsed = now;
    return entry.pool;
  }

  /** Closes and drops the idle pools; resolves with how many, once their tokens are refunded. */
  async sweep(): Promise<number> {
    const now = this.now();
    this.lastSweep = now;
    const idle: P[] = [];
    for (const [key, entry] of this.pools) {
      if (now - entry.lastUsed >= this.idleMs && now - entry.pool.dryUntilMs >= this.idleMs) {
        this.pools.delete(key);
        idle.push(entry.pool);
      }
    }
    await Promise.all(idle.map((pool) => pool.close().catch(() => {})));
    return idle.length;
  }

  /** Pools held now. */
  get size(): number {
    return this.pools.size;
  }

  /** Closes every pool (shutdown): their held tokens go back to Redis. */
  async closeAll(): Promise<void> {
    const pools = [...this.pools.values()].map((entry) => entry.pool);
    this.pools.clear();
    await Promise.all(pools.map((pool) => pool.close()));
  }
}
