/**
 * A plain TypeScript statement of what the limiter's scripts must do, used by the property tests as the
 * reference: given the Redis server time of each call (which the scripts return), replaying the calls in
 * server order through this model must give the same grants, waits and levels.
 *
 * Arithmetic is written in the same order as the Lua so that both produce the same doubles.
 */
export interface ModelBucketSpec {
  name: string;
  rate: number;
  capacity: number;
}

export interface ModelAcquireResult {
  granted: number;
  /** Without the client-side timer slack. */
  waitMs: number;
  tokensLeft: number[];
  blockedUntilMs: number | null;
}

interface ModelBucket {
  /** Null for a bucket that holds only a block (as block.lua leaves a new key): it counts as full. */
  tokens: number | null;
  ts: number;
  blockedUntilMs: number | null;
}

const EPSILON = 1e-9;

export class LimiterModel {
  private readonly buckets = new Map<string, ModelBucket>();

  /** The level of a bucket at `nowUs` (refilled, not written). */
  level(spec: ModelBucketSpec, nowUs: number): number {
    const bucket = this.buckets.get(spec.name);
    if (!bucket || bucket.tokens === null) return spec.capacity;
    const elapsed = Math.max(0, nowUs - bucket.ts);
    return Math.min(spec.capacity, bucket.tokens + (elapsed * spec.rate) / 1_000_000);
  }

  acquire(
    specs: ModelBucketSpec[],
    n: number,
    waitFor: number | undefined,
    nowUs: number,
  ): ModelAcquireResult {
    const nowMs = nowUs / 1000;
    const levels = specs.map((spec) => this.level(spec, nowUs));
    const available = Math.min(...levels.map((level) => Math.floor(level + EPSILON)));
    const blocks = specs
      .map((spec) => this.buckets.get(spec.name)?.blockedUntilMs ?? null)
      .filter((block): block is number => block !== null && block > nowMs);
    const blockedUntilMs = blocks.length > 0 ? Math.max(...blocks) : null;
    const granted = blockedUntilMs === null ? Math.min(n, available) : 0;
    const left = levels.map((level) => Math.max(0, level - granted));

    const smallestCapacity = Math.min(...specs.map((spec) => spec.capacity));
    const want = Math.min(waitFor ?? n - granted, Math.floor(smallestCapacity + EPSILON));
    let waitUs = 0;
    if (want > 0) {
      specs.forEach((spec, i) => {
        const deficit = want - (left[i] as number);
        if (deficit > 0) waitUs = Math.max(waitUs, (deficit / spec.rate) * 1_000_000);
      });
      if (blockedUntilMs !== null) waitUs = Math.max(waitUs, blockedUntilMs * 1000 - nowUs);
    }

    specs.forEach((spec, i) => {
      const previous = this.buckets.get(spec.name);
      const block = previous?.blockedUntilMs ?? null;
      this.buckets.set(spec.name, {
        tokens: left[i] as number,
        ts: nowUs,
        blockedUntilMs: block !== null && block > nowMs ? block : null,
      });
    });
    return { granted, waitMs: Math.ceil(waitUs / 1000), tokensLeft: left, blockedUntilMs };
  }

  refund(specs: ModelBucketSpec[], n: number, nowUs: number): number[] {
    return specs.map((spec) => {
      const level = Math.min(spec.capacity, this.level(spec, nowUs) + n);
      const block = this.buckets.get(spec.name)?.blockedUntilMs ?? null;
      this.buckets.set(spec.name, { tokens: level, ts: nowUs, blockedUntilMs: block });
      return level;
    });
  }

  /** Records a block as the block script reports it (its deadline is computed from the server clock). */
  block(name: string, blockedUntilMs: number): void {
    const bucket = this.buckets.get(name);
    if (bucket) bucket.blockedUntilMs = Math.max(bucket.blockedUntilMs ?? 0, blockedUntilMs);
    else this.buckets.set(name, { tokens: null, ts: 0, blockedUntilMs });
  }
}
