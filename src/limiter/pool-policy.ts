import type { PoolBucket } from './token-pool.ts';

/**
 * How a process sizes its token pools (see docs/architecture.md, "The limiter", and
 * docs/configuration.md, "Choosing the limits"). Pure: the same settings give the same pools.
 */
export interface PoolPolicy {
  /** Each tenant's own rate in tokens/s (AQUEDUCT_TENANT_RATE); undefined: tenants share the provider's. */
  tenantRate?: number | undefined;
  /** Each tenant's burst (AQUEDUCT_TENANT_BURST); default: one second of the tenant rate. */
  tenantBurst?: number | undefined;
  /** Tokens asked for per acquire when throttled (AQUEDUCT_ACQUIRE_CHUNK); default: see {@link acquireChunk}. */
  acquireChunk?: number | undefined;
  /** Pushes in flight at once per provider in one process (AQUEDUCT_SEND_CONCURRENCY). */
  sendConcurrency: number;
}

/** One pool's bucket group, its chunk and its window (the options of `TokenPool` it is built with). */
export interface PoolPlan {
  /** The pool's name among a process's pools: its narrowest bucket's name. */
  key: string;
  /** The provider's bucket, then the tenant's when tenants are capped. */
  buckets: PoolBucket[];
  chunk: number;
  window: number;
}

/** The name of the pool an event of `tenant` to `provider` draws from (the same for all of its events). */
export function poolKey(provider: string, tenant: string | undefined, policy: PoolPolicy): string {
  return tenant !== undefined && policy.tenantRate !== undefined ? `${provider}:tenant:${tenant}` : provider;
}

/** The pool an event of `tenant` draws from, given the provider's bucket. */
export function poolPlan(provider: PoolBucket, tenant: string | undefined, policy: PoolPolicy): PoolPlan {
  const key = poolKey(provider.name, tenant, policy);
  const buckets = [provider];
  if (key !== provider.name) {
    const rate = policy.tenantRate ?? provider.rate;
    buckets.push({ name: key, rate, capacity: policy.tenantBurst ?? Math.ceil(rate) });
  }
  return {
    key,
    buckets,
    chunk: acquireChunk(
      provider.rate,
      Math.min(...buckets.map((bucket) => bucket.capacity)),
      policy.acquireChunk,
    ),
    window: sendWindow(provider.rate, policy.sendConcurrency),
  };
}

/**
 * Tokens a throttled pool waits for before it asks again: the configured chunk, else a quarter second
 * of the provider's rate but never under 200 tokens, and never over a quarter of the smallest bucket's
 * capacity (at least 1). Throttled processes tend to wake together and split one refill, so each call
 * gets about chunk ÷ processes: a large chunk keeps Redis near a call per hundred pushes. The quarter: a
 * throttled pool's turn comes when its chunk has refilled, and is taken only once its partition has
 * been woken and fetched again; the bucket goes on refilling meanwhile only while it has room, so a
 * chunk near the whole capacity loses the refill of that lateness at every turn, a large share of the
 * rate when the burst is small (docs/configuration.md, "Choosing the limits").
 */
export function acquireChunk(providerRate: number, smallestCapacity: number, configured?: number): number {
  if (configured !== undefined) return configured;
  const byRate = Math.max(200, Math.ceil(providerRate / 4));
  return Math.max(1, Math.min(byRate, Math.floor(smallestCapacity / 4)));
}

/**
 * The most tokens a pool holds that the provider has not seen yet (`TokenPoolOptions.window`): the pushes
 * one process can have in flight, or a tenth of a second of the rate when that is more, so that a
 * provider with no effective limit costs one acquire per many windows of sends, not one per window.
 */
export function sendWindow(providerRate: number, sendConcurrency: number): number {
  return Math.max(sendConcurrency, Math.ceil(providerRate / 10));
}
