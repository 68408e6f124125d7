import type { BucketSpec, TokenBucketLimiter } from '../limiter/index.ts';
import type { TenantLimit } from './config.ts';

/**
 * Per-tenant admission: each tenant's events draw from its own token bucket in Redis, shared by every
 * gateway replica (so the limit holds at any replica count). One token is one event: a batch of 100
 * costs 100. The buckets are named `gateway.<tenant>`: the whole name is the key's hash tag, so on a
 * Redis Cluster the tenants' buckets spread over the slots (every admission is one script call on one
 * tenant's bucket, so nothing needs two tenants in one slot), and none shares a key or a slot's script
 * call with the consumer's provider buckets (`fcm`, `fcm:tenant:<tenant>`, …), which limit delivery,
 * not admission.
 */

/** The bucket name of a tenant's admission limit. */
export function admissionBucketName(tenant: string): string {
  return `gateway.${tenant}`;
}

/** The answer to an admission request. */
export type Admission =
  | {
      /** `admitted`: the events may be written; `unlimited`: the tenant has no limit. */
      kind: 'admitted';
      limit: TenantLimit;
      /** Whole tokens left after this request. */
      remaining: number;
      /** Seconds until the bucket is full again. */
      resetSeconds: number;
    }
  | { kind: 'unlimited' }
  | {
      kind: 'throttled';
      limit: TenantLimit;
      remaining: number;
      resetSeconds: number;
      /** Seconds until the whole request would be admitted (>= 1): the 429's Retry-After. */
      retryAfterSeconds: number;
      /** The same in milliseconds, unrounded. */
      waitMs: number;
    }
  | {
      /** More events than the bucket can ever hold at once: this request can never be admitted. */
      kind: 'too-large';
      limit: TenantLimit;
      remaining: number;
      resetSeconds: number;
    };

/** Options of {@link TenantAdmission}. */
export interface TenantAdmissionOptions {
  /** The limiter holding the buckets; required when any tenant is limited. */
  limiter?: TokenBucketLimiter;
  /** The limit of every tenant without an override; null: such tenants are not limited. */
  defaultLimit: TenantLimit | null;
  /** Limits of named tenants, replacing the default for them. */
  overrides?: ReadonlyMap<string, TenantLimit>;
}

/** Admits a request's events for a tenant, all of them or none, through the distributed token bucket. */
export class TenantAdmission {
  private readonly limiter: TokenBucketLimiter | undefined;
  private readonly defaultLimit: TenantLimit | null;
  private readonly overrides: ReadonlyMap<string, TenantLimit>;

  constructor(options: TenantAdmissionOptions) {
    this.limiter = options.limiter;
    this.defaultLimit = options.defaultLimit;
    this.overrides = options.overrides ?? new Map();
    if (this.limitsAnyTenant && !this.limiter)
      throw new Error('TenantAdmission: tenants are limited but no limiter was given');
  }

  /** The limit that applies to a tenant, or null when it has none. */
  limitOf(tenant: string): TenantLimit | null {
    return this.overrides.get(tenant) ?? this.defaultLimit;
  }

  /** True when at least one tenant is limited (so Redis is needed). */
  get limitsAnyTenant(): boolean {
    return this.defaultLimit !== null || this.overrides.size > 0;
  }

  /**
   * Takes `events` tokens from the tenant's bucket, or none: the limiter grants partial batches, so a
   * partial grant is given back at once and the request is throttled as a whole (a caller retries a
   * request, not a part of it). Retry-After is the limiter's wait for the missing tokens, which after the
   * refund is the time until the whole request fits. `events = 0` only reads the bucket (for the
   * rate-limit fields of a response that spends nothing, such as a 400).
   * @throws LimiterUnavailableError when Redis cannot be asked (the caller answers 503)
   */
  async admit(tenant: string, events: number): Promise<Admission> {
    const limit = this.limitOf(tenant);
    if (limit === null) return { kind: 'unlimited' };
    const bucket: BucketSpec = { name: admissionBucketName(tenant), rate: limit.rate, capacity: limit.burst };
    const tooLarge = events > limit.burst;
    const limiter = this.limiter as TokenBucketLimiter; // present whenever a limit is (constructor)
    const result = await limiter.acquire([bucket], tooLarge ? 0 : events);
    let tokens = result.tokensLeft[0] ?? 0;
    if (result.failedOpen) tokens = limit.burst;
    if (tooLarge) {
      return {
        kind: 'too-large',
        limit,
        remaining: Math.floor(tokens),
        resetSeconds: resetSeconds(limit, tokens),
      };
    }
    if (result.granted >= events) {
      return {
        kind: 'admitted',
        limit,
        remaining: Math.floor(tokens),
        resetSeconds: resetSeconds(limit, tokens),
      };
    }
    if (result.granted > 0) {
      const refund = await limiter.refund([bucket], result.granted);
      tokens = refund.tokensLeft[0] ?? tokens + result.granted;
    }
    return {
      kind: 'throttled',
      limit,
      remaining: Math.floor(tokens),
      resetSeconds: resetSeconds(limit, tokens),
      retryAfterSeconds: Math.max(1, Math.ceil(result.waitMs / 1000)),
      waitMs: result.waitMs,
    };
  }

  /** Units a tenant's refused batches cost that its bucket did not hold (this replica's, capped). */
  private readonly owed = new Map<string, number>();

  /**
   * The door of a request: one unit for the request itself, plus what the tenant's earlier refused
   * batches still owe (see {@link charge}), all or nothing. A tenant that keeps sending invalid batches
   * thus pays for every event in them before its next request is read.
   * @throws LimiterUnavailableError when Redis cannot be asked
   */
  async admitRequest(tenant: string): Promise<Admission> {
    const units = 1 + (this.owed.get(tenant) ?? 0);
    const known = this.knownRefusal(tenant, units, Date.now());
    if (known) return known;
    const asked = Date.now();
    const admission = await this.admit(tenant, units);
    if (admission.kind === 'admitted') this.owed.delete(tenant);
    if (admission.kind === 'throttled') {
      this.refusals.set(tenant, {
        units,
        tokens: admission.remaining,
        atMs: asked,
        untilMs: asked + admission.waitMs,
      });
    } else {
      this.refusals.delete(tenant);
    }
    return admission;
  }

  /**
   * This replica's last refusal of each tenant's request: until `untilMs` its bucket cannot hold
   * `units` (the bucket only refills at its rate; other replicas only take from it), so a request of as
   * many units or more is refused here without asking Redis. A flood from a throttled tenant then costs
   * no Redis call per request. Given-back tokens end the refusal ({@link giveBack}).
   */
  private readonly refusals = new Map<
    string,
    { units: number; tokens: number; atMs: number; untilMs: number }
  >();

  private knownRefusal(tenant: string, units: number, nowMs: number): Admission | undefined {
    const refusal = this.refusals.get(tenant);
    const limit = this.limitOf(tenant);
    if (!refusal || limit === null || nowMs >= refusal.untilMs || units < refusal.units) return undefined;
    const tokens = Math.min(limit.burst, refusal.tokens + ((nowMs - refusal.atMs) / 1000) * limit.rate);
    const waitMs = refusal.untilMs - nowMs;
    return {
      kind: 'throttled',
      limit,
      remaining: Math.floor(tokens),
      resetSeconds: resetSeconds(limit, tokens),
      retryAfterSeconds: Math.max(1, Math.ceil(waitMs / 1000)),
      waitMs,
    };
  }

  /**
   * Charges a refused request's events: takes what the tenant's bucket holds of them now, and what it
   * does not hold is owed, paid at the tenant's next request ({@link admitRequest}); the debt is capped
   * below the burst, so a request can always be admitted once the bucket refills. An invalid batch
   * thus costs its events like a valid one.
   * @throws LimiterUnavailableError when Redis cannot be asked
   */
  async charge(tenant: string, events: number): Promise<void> {
    const limit = this.limitOf(tenant);
    if (limit === null || events <= 0 || !this.limiter) return;
    const wanted = Math.min(events, limit.burst);
    const result = await this.limiter.acquire(
      [{ name: admissionBucketName(tenant), rate: limit.rate, capacity: limit.burst }],
      wanted,
    );
    const unpaid = result.failedOpen ? 0 : wanted - result.granted;
    if (unpaid > 0) {
      this.owed.set(tenant, Math.min(limit.burst - 1, (this.owed.get(tenant) ?? 0) + unpaid));
    }
  }

  /** Gives a tenant's tokens back (events admitted but then not accepted, e.g. Kafka was down). */
  async giveBack(tenant: string, events: number): Promise<void> {
    const limit = this.limitOf(tenant);
    if (limit === null || events === 0 || !this.limiter) return;
    this.refusals.delete(tenant);
    await this.limiter.refund(
      [{ name: admissionBucketName(tenant), rate: limit.rate, capacity: limit.burst }],
      events,
    );
  }
}

function resetSeconds(limit: TenantLimit, tokens: number): number {
  return Math.max(0, Math.ceil((limit.burst - tokens) / limit.rate));
}

/** The policy name used in both rate-limit fields. */
const POLICY = 'tenant';

/**
 * The IETF rate-limit fields (draft-ietf-httpapi-ratelimit-headers, the two-field form of drafts 09+):
 * `RateLimit-Policy: "tenant";q=<burst>;w=<seconds to refill the burst>` and
 * `RateLimit: "tenant";r=<events left>;t=<seconds until the bucket is full>`. The quota unit is one
 * event (a batch of 100 costs 100); a token bucket has no fixed window, so `w` is the time the rate takes
 * to give the whole burst back.
 */
export function rateLimitHeaders(admission: Admission): Record<string, string> {
  if (admission.kind === 'unlimited') return {};
  const { limit } = admission;
  const window = Math.max(1, Math.ceil(limit.burst / limit.rate));
  return {
    'ratelimit-policy': policyField(limit, window),
    ratelimit: `"${POLICY}";r=${admission.remaining};t=${admission.resetSeconds}`,
  };
}

/** The policy field alone, for a response without the bucket's state (Redis could not be asked). */
export function policyHeaders(limit: TenantLimit | null): Record<string, string> {
  if (limit === null) return {};
  return { 'ratelimit-policy': policyField(limit, Math.max(1, Math.ceil(limit.burst / limit.rate))) };
}

function policyField(limit: TenantLimit, window: number): string {
  return `"${POLICY}";q=${limit.burst};w=${window}`;
}
