/**
 * Aqueduct's distributed token bucket (see the README, "The limiter", and the headers of `lua/*.lua`).
 */
export { LimiterArgumentError, LimiterUnavailableError } from './errors.ts';
export { bucketTag } from './keys.ts';
export type {
  AcquireOptions,
  AcquireRequest,
  AcquireResult,
  BucketSpec,
  BucketState,
  FailurePolicy,
  LimiterOptions,
  RefundResult,
} from './limiter.ts';
export { TokenBucketLimiter } from './limiter.ts';
