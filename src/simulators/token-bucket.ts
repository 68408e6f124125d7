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

  /** Gives back a token taken for a request that was refused after all (never above the burst). */
  giveBack(): void {
    this.tokens = Math.min(this.burst, this.tokens + 1);
  }

  /** The same bucket with other limits from `nowMs` on: its level carries over (at most the new burst). */
  retuned(rate: number, burst: number, nowMs: number): TokenBucket {
    const next = new TokenBucket(rate, burst, nowMs);
    next.tokens = Math.min(burst, this.available(nowMs));
    return next;
  }

  /** Tokens available at `nowMs` (for /stats). */
  available(nowMs: number): number {
    const elapsed = Math.max(0, nowMs - this.lastMs);
    return Math.min(this.burst, this.tokens + (elapsed * this.rate) / 1000);
  }
}
