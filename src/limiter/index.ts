/**
 * Aqueduct's distributed token bucket (see docs/architecture.md, "The limiter", and the headers of `lua/*.lua`).
 */
export { LimiterArgumentError, LimiterUnavailableError } from './errors.ts';
export { bucketTag } from './keys.ts';
export { TokenBucketLimiter } from './limiter.ts';
export type * from './types.ts';
