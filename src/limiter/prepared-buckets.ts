import { LimiterArgumentError } from './errors.ts';
import { bucketKeys } from './keys.ts';
import type { BucketSpec } from './types.ts';

/** The keys of a call's buckets, after checking every spec (as the scripts would). */
export function validatedKeys(keyPrefix: string, buckets: BucketSpec[]): string[] {
  if (!Array.isArray(buckets))
    throw new LimiterArgumentError('buckets', 'buckets must be an array of BucketSpec');
  const names = new Array<string>(buckets.length);
  for (let i = 0; i < buckets.length; i++) {
    const bucket = buckets[i];
    if (typeof bucket !== 'object' || bucket === null) {
      throw new LimiterArgumentError('buckets', `buckets[${i}] must be a BucketSpec, got ${String(bucket)}`);
    }
    const { name, rate, capacity } = bucket;
    names[i] = name;
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0) {
      throw new LimiterArgumentError(
        'rate',
        `rate of bucket "${name}" must be a finite number > 0, got ${rate}`,
      );
    }
    if (typeof capacity !== 'number' || !Number.isFinite(capacity) || capacity < 1) {
      throw new LimiterArgumentError(
        'capacity',
        `capacity of bucket "${name}" must be a finite number >= 1, got ${capacity}`,
      );
    }
  }
  return bucketKeys(keyPrefix, names);
}

/**
 * One call's buckets, validated and turned into acquire.lua's key and argument texts once, then reused
 * for as long as the caller passes the same array holding the same specs with the same fields (a
 * consumer asks for the same buckets on every batch). ioredis flattens nested arrays in a command's
 * arguments, so these go out as they are, without being copied into a new array per call.
 */
export interface PreparedBuckets {
  /** The array this was made from. */
  readonly buckets: readonly BucketSpec[];
  /** Its specs' fields as validated, `name, rate, capacity` per spec, to notice a change. */
  readonly fields: ReadonlyArray<string | number>;
  /** `numkeys, ...keys` */
  readonly keys: readonly string[];
  /** `minTtlSeconds, rate[1], capacity[1], …` */
  readonly argv: readonly string[];
}

/**
 * How many bucket arrays are kept prepared (the latest ones). A small array searched by identity rather
 * than a WeakMap: a caller that builds a new array for every call (the gateway) would otherwise pay for
 * a WeakMap entry per call, which costs more than preparing the array does.
 */
const PREPARED_ARRAYS = 8;

/** The prepared forms of the bucket arrays a limiter was called with most recently. */
export class PreparedBucketsCache {
  private readonly keyPrefix: string;
  private readonly minTtlText: string;
  private readonly prepared: PreparedBuckets[] = [];
  private nextPrepared = 0;

  constructor(keyPrefix: string, minTtlSeconds: number) {
    this.keyPrefix = keyPrefix;
    this.minTtlText = String(minTtlSeconds);
  }

  /** The prepared form of `buckets`: kept while nothing in it changed, else validated anew. */
  prepare(buckets: BucketSpec[]): PreparedBuckets {
    const cache = this.prepared;
    let slot = -1;
    for (let c = 0; c < cache.length; c++) {
      const cached = cache[c] as PreparedBuckets;
      if (cached.buckets !== buckets) continue;
      const fields = cached.fields;
      let same = fields.length === 3 * buckets.length;
      for (let i = 0; i < buckets.length && same; i++) {
        const bucket = buckets[i];
        same =
          bucket !== undefined &&
          bucket.name === fields[3 * i] &&
          bucket.rate === fields[3 * i + 1] &&
          bucket.capacity === fields[3 * i + 2];
      }
      if (same) return cached;
      slot = c; // changed since it was prepared: prepared again, in its place
      break;
    }
    const keys = validatedKeys(this.keyPrefix, buckets);
    const fields: Array<string | number> = [];
    const argv = [this.minTtlText];
    for (const { name, rate, capacity } of buckets) {
      fields.push(name, rate, capacity);
      argv.push(String(rate), String(capacity));
    }
    keys.unshift(String(keys.length));
    const prepared: PreparedBuckets = { buckets, fields, keys, argv };
    if (slot === -1) {
      slot = this.nextPrepared; // the oldest
      this.nextPrepared = (slot + 1) % PREPARED_ARRAYS;
    }
    cache[slot] = prepared;
    return prepared;
  }
}
