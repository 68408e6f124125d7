import type { Redis } from 'ioredis';
import { LimiterArgumentError, LimiterUnavailableError, toLimiterError } from './errors.ts';
import { assertKeyPrefix, bucketKeys, bucketNameFromKey, bucketScan, bucketTag } from './keys.ts';
import {
  defineLimiterScripts,
  queueScript,
  type ScriptCall,
  type ScriptPipeline,
  scriptCall,
} from './scripts.ts';
import { CallTimeouts } from './timeouts.ts';

/** One token bucket a call draws from. */
export interface BucketSpec {
  /**
   * `<tag>` or `<tag>:<rest>`, e.g. `fcm` or `fcm:tenant:acme`. All buckets of one call must share the
   * tag (the part before the first ':'): it is the Redis Cluster hash tag of their keys.
   */
  name: string;
  /** Refill rate in tokens per second; finite and > 0, may be fractional (0.5 = one token every 2 s). */
  rate: number;
  /** Most tokens the bucket holds (the largest burst); finite and >= 1. A new bucket starts full. */
  capacity: number;
}

/** Options of {@link TokenBucketLimiter.acquire}. */
export interface AcquireOptions {
  /**
   * How many tokens the returned `waitMs` is for. Default: the part of `n` that was not granted. Clamped
   * to the smallest capacity (more could never be available at once).
   */
  waitFor?: number;
}

/** One request of {@link TokenBucketLimiter.acquireMany}. */
export interface AcquireRequest extends AcquireOptions {
  buckets: BucketSpec[];
  n: number;
}

/** The answer to an acquire. */
export interface AcquireResult {
  /** Tokens granted: min(n, whole tokens of every bucket), deducted from every bucket atomically. */
  granted: number;
  /**
   * Milliseconds until `waitFor` more tokens are available in all buckets and no block is active; 0 when
   * nothing remains to wait for. Rounded up, plus `timerSlackMs`, so a plain `setTimeout(…, waitMs)` is
   * long enough (see {@link LimiterOptions.timerSlackMs}).
   */
  waitMs: number;
  /** Tokens left in each bucket (in the order given), fractions preserved. NaN when failed open. */
  tokensLeft: number[];
  /** Epoch ms (Redis clock) of the latest active block-until among the buckets, or null. */
  blockedUntilMs: number | null;
  /** The Redis server time of the decision, µs since the epoch (NaN when failed open). */
  serverTimeUs: number;
  /** True when Redis failed and `failurePolicy: 'open'` granted all of `n` without asking it. */
  failedOpen: boolean;
}

/** The answer to a refund. */
export interface RefundResult {
  /** Tokens in each bucket after the refund (in the order given), fractions preserved. */
  tokensLeft: number[];
  /** The Redis server time of the refund, µs since the epoch. */
  serverTimeUs: number;
}

/** A bucket as `aqueduct inspect` shows it. */
export interface BucketState {
  name: string;
  key: string;
  /**
   * Tokens now: the stored level refilled to the Redis server's current time. Null for a bucket that
   * holds only a block (blocked before it was ever used: its rate and capacity are not known yet).
   */
  tokens: number | null;
  /** Rate and capacity as last given by an acquire or refund (null as for `tokens`). */
  rate: number | null;
  capacity: number | null;
  /** Epoch ms of an active block-until, or null. */
  blockedUntilMs: number | null;
  /** Time to live in ms (null: no expiry, which the limiter never leaves behind). */
  ttlMs: number | null;
  /** The Redis server time the state was computed at, epoch ms. */
  serverTimeMs: number;
}

/** What to do when Redis cannot be asked. */
export type FailurePolicy = 'closed' | 'open';

/** Options of {@link TokenBucketLimiter}. */
export interface LimiterOptions {
  /**
   * First segment of every key (default `aqueduct`): keys are `<keyPrefix>:{<tag>}:bucket[:<rest>]`. Use
   * this rather than ioredis' own `keyPrefix` option, which SCAN (and so `inspect`) does not apply.
   */
  keyPrefix?: string;
  /**
   * When Redis fails or times out during an acquire:
   * - `'closed'` (default): throw {@link LimiterUnavailableError}; the caller pauses and retries later.
   *   Nothing is sent that the limit did not allow.
   * - `'open'`: grant all of `n` (`failedOpen: true`, `onFailOpen` is called) so delivery continues.
   *   RISK: while Redis is down there is no limit at all; every instance sends as fast as it can and the
   *   provider may throttle or suspend the sender. Pick it only when late pushes cost more than that.
   * Refund, blockUntil and inspect always throw {@link LimiterUnavailableError}.
   */
  failurePolicy?: FailurePolicy;
  /** Shortest TTL of a bucket key in seconds (default 60); see the TTL rule in `lua/acquire.lua`. */
  minTtlSeconds?: number;
  /**
   * A call that Redis has not answered after this many ms fails with {@link LimiterUnavailableError}
   * (default 1000; 0 waits as long as the ioredis client does). The script may still run later; tokens it
   * then takes are lost until they refill, which errs on the side of sending less.
   */
  timeoutMs?: number;
  /**
   * Added to every non-zero `waitMs` (default 1). Node timers count whole milliseconds from a clock read
   * at the start of the event-loop turn, so `setTimeout(f, w)` may run up to 1 ms before `w` ms have
   * really passed since the reply arrived; without the slack a caller that sleeps exactly `waitMs` would
   * come back a fraction of a token short.
   */
  timerSlackMs?: number;
  /** Called with the error each time `failurePolicy: 'open'` turns a Redis failure into a full grant. */
  onFailOpen?: (error: LimiterUnavailableError) => void;
}

const DEFAULTS = { keyPrefix: 'aqueduct', minTtlSeconds: 60, timeoutMs: 1000, timerSlackMs: 1 };

/**
 * One call's buckets, validated and turned into acquire.lua's key and argument texts once, then reused
 * for as long as the caller passes the same array holding the same specs with the same fields (a
 * consumer asks for the same buckets on every batch). ioredis flattens nested arrays in a command's
 * arguments, so these go out as they are, without being copied into a new array per call.
 */
interface PreparedBuckets {
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
 * How many bucket arrays a limiter keeps prepared (the latest ones). A small array searched by identity
 * rather than a WeakMap: a caller that builds a new array for every call (the gateway) would otherwise
 * pay for a WeakMap entry per call, which costs more than preparing the array does.
 */
const PREPARED_ARRAYS = 8;

/** acquire.lua's `numkeys, keys, argv`: the prepared parts around the per-call `n` and `waitFor`. */
type AcquireArgs = [readonly string[], string, string, readonly string[]];

/**
 * Aqueduct's distributed token bucket: every consumer instance asks the same Redis, which refills each
 * bucket continuously by its own clock and grants whole batches (and partial batches) of tokens from
 * several buckets at once in one atomic script call. See `lua/acquire.lua` for the exact semantics.
 */
export class TokenBucketLimiter {
  readonly keyPrefix: string;
  readonly failurePolicy: FailurePolicy;
  private readonly redis: Redis;
  private readonly minTtlSeconds: number;
  private readonly timeoutMs: number;
  private readonly timeouts: CallTimeouts | undefined;
  private readonly timerSlackMs: number;
  private readonly onFailOpen: ((error: LimiterUnavailableError) => void) | undefined;
  private readonly acquireScript: ScriptCall;
  private readonly refundScript: ScriptCall;
  private readonly blockScript: ScriptCall;
  private readonly minTtlText: string;
  private readonly prepared: PreparedBuckets[] = [];
  private nextPrepared = 0;

  constructor(redis: Redis, options: LimiterOptions = {}) {
    this.redis = redis;
    this.keyPrefix = options.keyPrefix ?? DEFAULTS.keyPrefix;
    assertKeyPrefix(this.keyPrefix);
    this.failurePolicy = options.failurePolicy ?? 'closed';
    if (this.failurePolicy !== 'closed' && this.failurePolicy !== 'open') {
      throw new LimiterArgumentError(
        'failurePolicy',
        `failurePolicy must be 'closed' or 'open', got ${String(this.failurePolicy)}`,
      );
    }
    this.minTtlSeconds = options.minTtlSeconds ?? DEFAULTS.minTtlSeconds;
    if (!Number.isInteger(this.minTtlSeconds) || this.minTtlSeconds < 1) {
      throw new LimiterArgumentError(
        'minTtlSeconds',
        `minTtlSeconds must be an integer >= 1, got ${this.minTtlSeconds}`,
      );
    }
    this.minTtlText = String(this.minTtlSeconds);
    this.timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    // setTimeout fires at once for anything above 2^31 - 1 ms (and for Infinity).
    if (!(this.timeoutMs >= 0 && this.timeoutMs <= 2_147_483_647)) {
      throw new LimiterArgumentError(
        'timeoutMs',
        `timeoutMs must be a number of ms in [0, 2^31 - 1], got ${this.timeoutMs}`,
      );
    }
    this.timeouts = this.timeoutMs > 0 ? new CallTimeouts(this.timeoutMs) : undefined;
    this.timerSlackMs = options.timerSlackMs ?? DEFAULTS.timerSlackMs;
    if (!(this.timerSlackMs >= 0 && Number.isFinite(this.timerSlackMs))) {
      throw new LimiterArgumentError(
        'timerSlackMs',
        `timerSlackMs must be a finite number >= 0, got ${this.timerSlackMs}`,
      );
    }
    this.onFailOpen = options.onFailOpen;
    defineLimiterScripts(redis);
    this.acquireScript = scriptCall(redis, 'acquire');
    this.refundScript = scriptCall(redis, 'refund');
    this.blockScript = scriptCall(redis, 'block');
  }

  /** The Redis key of a bucket (see the key layout in `keys.ts` and the README). */
  keyOf(name: string): string {
    return bucketKeys(this.keyPrefix, [name])[0] as string;
  }

  /**
   * Takes up to `n` tokens from every bucket at once, atomically: `granted = min(n, whole tokens of
   * every bucket)`, nothing while a bucket is blocked. Never waits itself: `waitMs` says how long to.
   * @throws LimiterArgumentError for a malformed call (whatever the failure policy)
   * @throws LimiterUnavailableError when Redis fails and `failurePolicy` is `'closed'`
   */
  acquire(buckets: BucketSpec[], n: number, options?: AcquireOptions): Promise<AcquireResult> {
    // One promise of its own, settled by the reply or by the timeout, rather than an async function
    // awaiting a timeout wrapper around the call: this runs once per batch of every consumer.
    return new Promise<AcquireResult>((resolve, reject) => {
      const args = this.acquireArgs(buckets, n, options?.waitFor); // a throw here rejects
      const fail = (error: unknown) => {
        try {
          resolve(this.acquireFailed(toLimiterError(error, 'acquire'), buckets, n));
        } catch (failure) {
          reject(failure);
        }
      };
      const timeouts = this.timeouts;
      const watched = timeouts?.watch(() => fail(this.timeoutError('acquire')));
      let reply: Promise<unknown>;
      try {
        reply = this.acquireScript(...args);
      } catch (error) {
        reply = Promise.reject(error);
      }
      reply.then(
        (value) => {
          if (watched !== undefined && !timeouts?.settle(watched)) return; // it timed out
          try {
            resolve(this.acquireResult(value as string));
          } catch (error) {
            fail(error); // not the reply acquire.lua gives
          }
        },
        (error: unknown) => {
          if (watched === undefined || timeouts?.settle(watched)) fail(error);
        },
      );
    });
  }

  /**
   * Several acquires (e.g. one per partition of a fetched batch) in one pipeline: one write, one round
   * trip, each request still atomic on its own. Every request is validated before anything is sent.
   * With `failurePolicy: 'closed'`, one request that Redis fails makes the whole call throw; tokens the
   * others were granted are then not used (they refill: the error is on the side of sending less).
   */
  async acquireMany(requests: AcquireRequest[]): Promise<AcquireResult[]> {
    if (!Array.isArray(requests)) throw new LimiterArgumentError('requests', 'requests must be an array');
    if (requests.length === 0) return [];
    const argsList = requests.map((request) => this.acquireArgs(request.buckets, request.n, request.waitFor));
    const pipeline = this.redis.pipeline() as unknown as ScriptPipeline;
    for (const args of argsList) queueScript(pipeline, 'acquire', args);
    let replies: Array<[Error | null, unknown]>;
    try {
      const executed = await this.withTimeout(pipeline.exec(), 'acquire');
      if (executed === null) throw new Error('the pipeline was discarded');
      replies = executed;
    } catch (error) {
      const failure = toLimiterError(error, 'acquire');
      return requests.map((request) => this.acquireFailed(failure, request.buckets, request.n));
    }
    return requests.map((request, i) => {
      const [error, reply] = replies[i] ?? [new Error('no reply'), null];
      if (error) return this.acquireFailed(toLimiterError(error, 'acquire'), request.buckets, request.n);
      return this.acquireResult(reply as string);
    });
  }

  /** Gives `n` unused tokens back to every bucket, never above a bucket's capacity. */
  async refund(buckets: BucketSpec[], n: number): Promise<RefundResult> {
    const keys = this.keysOf(buckets);
    if (!Number.isInteger(n) || n < 0)
      throw new LimiterArgumentError('n', `n must be an integer >= 0, got ${n}`);
    const args: Array<string | number> = [keys.length, ...keys, n, this.minTtlSeconds];
    for (const bucket of buckets) args.push(bucket.rate, bucket.capacity);
    try {
      const reply = (await this.withTimeout(this.refundScript(...args), 'refund')) as string[];
      return { tokensLeft: reply.slice(1).map(Number), serverTimeUs: Number(reply[0]) };
    } catch (error) {
      throw toLimiterError(error, 'refund');
    }
  }

  /**
   * Blocks buckets fleet-wide for `retryAfterMs` from now, as measured by the Redis server's clock (so the
   * instances' clocks do not matter): pass a provider's 429 Retry-After converted to milliseconds. While
   * blocked, every acquire that includes one of these buckets gets nothing and waits until the block
   * ends. A block never shortens an existing one.
   * @returns the epoch ms (Redis clock) the latest of these blocks now ends
   */
  async blockUntil(buckets: ReadonlyArray<BucketSpec | string>, retryAfterMs: number): Promise<number> {
    if (!Array.isArray(buckets)) throw new LimiterArgumentError('buckets', 'buckets must be an array');
    const names = buckets.map((bucket: BucketSpec | string) =>
      typeof bucket === 'string' ? bucket : bucket?.name,
    );
    const keys = bucketKeys(this.keyPrefix, names);
    if (typeof retryAfterMs !== 'number' || !Number.isFinite(retryAfterMs) || retryAfterMs < 0) {
      throw new LimiterArgumentError(
        'retryAfterMs',
        `retryAfterMs must be a finite number >= 0, got ${retryAfterMs}`,
      );
    }
    try {
      const reply = (await this.withTimeout(
        this.blockScript(keys.length, ...keys, retryAfterMs, this.minTtlSeconds),
        'blockUntil',
      )) as string[];
      return Math.max(...reply.slice(1).map(Number));
    } catch (error) {
      throw toLimiterError(error, 'blockUntil');
    }
  }

  /**
   * Every bucket under this limiter's key prefix whose name matches `pattern` (a Redis glob on names,
   * default `*`), as it is at the Redis server's current time, sorted by name. Uses SCAN, never KEYS.
   */
  async inspect(pattern = '*'): Promise<BucketState[]> {
    const { match, matches } = bucketScan(this.keyPrefix, pattern);
    try {
      const byTag = new Map<string, Map<string, string>>();
      let cursor = '0';
      do {
        const [next, keys] = await this.withTimeout(
          this.redis.scan(cursor, 'MATCH', match, 'COUNT', 1000),
          'inspect',
        );
        cursor = next;
        for (const key of keys) {
          const name = bucketNameFromKey(this.keyPrefix, key);
          if (name === undefined || !matches(name)) continue;
          const tag = bucketTag(name);
          let group = byTag.get(tag);
          if (!group) {
            group = new Map();
            byTag.set(tag, group);
          }
          group.set(key, name); // SCAN may return a key twice
        }
      } while (cursor !== '0');

      // One script call per tag (one slot) and at most 500 keys, all in one pipeline.
      const batches: Array<Array<[string, string]>> = [];
      for (const group of byTag.values()) {
        const entries = [...group.entries()];
        for (let i = 0; i < entries.length; i += 500) batches.push(entries.slice(i, i + 500));
      }
      if (batches.length === 0) return [];
      const pipeline = this.redis.pipeline() as unknown as ScriptPipeline;
      for (const batch of batches) {
        queueScript(pipeline, 'inspect', [batch.length, ...batch.map(([key]) => key)]);
      }
      const replies = await this.withTimeout(pipeline.exec(), 'inspect');
      const states: BucketState[] = [];
      batches.forEach((batch, b) => {
        const [error, value] = replies?.[b] ?? [new Error('no reply'), null];
        if (error) throw error;
        const reply = value as string[];
        const serverTimeMs = Number(reply[0]) / 1000;
        batch.forEach(([key, name], i) => {
          const field = (f: number) => reply[1 + i * 6 + f] ?? '';
          if (field(0) !== '1') return; // expired since SCAN found it
          const pttl = Number(field(5));
          states.push({
            name,
            key,
            tokens: numberOrNull(field(1)),
            rate: numberOrNull(field(2)),
            capacity: numberOrNull(field(3)),
            blockedUntilMs: numberOrNull(field(4)),
            ttlMs: pttl >= 0 ? pttl : null,
            serverTimeMs,
          });
        });
      });
      return states.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    } catch (error) {
      throw toLimiterError(error, 'inspect');
    }
  }

  private keysOf(buckets: BucketSpec[]): string[] {
    if (!Array.isArray(buckets))
      throw new LimiterArgumentError('buckets', 'buckets must be an array of BucketSpec');
    const names = new Array<string>(buckets.length);
    for (let i = 0; i < buckets.length; i++) {
      const bucket = buckets[i];
      if (typeof bucket !== 'object' || bucket === null) {
        throw new LimiterArgumentError(
          'buckets',
          `buckets[${i}] must be a BucketSpec, got ${String(bucket)}`,
        );
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
    return bucketKeys(this.keyPrefix, names);
  }

  /** Validates an acquire (as the script would) and builds its `numkeys, keys, argv`. */
  private acquireArgs(buckets: BucketSpec[], n: number, waitFor: number | undefined): AcquireArgs {
    const prepared = this.prepare(buckets);
    if (!Number.isInteger(n) || n < 0)
      throw new LimiterArgumentError('n', `n must be an integer >= 0, got ${n}`);
    if (waitFor !== undefined && (!Number.isInteger(waitFor) || waitFor < 0)) {
      throw new LimiterArgumentError('waitFor', `waitFor must be an integer >= 0, got ${waitFor}`);
    }
    return [prepared.keys, String(n), waitFor === undefined ? '' : String(waitFor), prepared.argv];
  }

  /** The prepared form of `buckets`: kept while nothing in it changed, else validated anew. */
  private prepare(buckets: BucketSpec[]): PreparedBuckets {
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
    const keys = this.keysOf(buckets); // validates
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

  /** Parses acquire.lua's reply: 'granted waitMs blockedUntilMs nowMicros tokensLeft…'. */
  private acquireResult(text: string): AcquireResult {
    const reply = text.split(' ');
    const waitMs = Number(reply[1]);
    const tokensLeft = new Array<number>(reply.length - 4);
    for (let i = 4; i < reply.length; i++) tokensLeft[i - 4] = Number(reply[i]);
    return {
      granted: Number(reply[0]),
      waitMs: waitMs > 0 ? waitMs + this.timerSlackMs : 0,
      tokensLeft,
      blockedUntilMs: reply[2] ? Number(reply[2]) : null,
      serverTimeUs: Number(reply[3]),
      failedOpen: false,
    };
  }

  private acquireFailed(
    failure: LimiterArgumentError | LimiterUnavailableError,
    buckets: BucketSpec[],
    n: number,
  ): AcquireResult {
    if (failure instanceof LimiterArgumentError || this.failurePolicy === 'closed') throw failure;
    this.onFailOpen?.(failure);
    return {
      granted: n,
      waitMs: 0,
      tokensLeft: buckets.map(() => Number.NaN),
      blockedUntilMs: null,
      serverTimeUs: Number.NaN,
      failedOpen: true,
    };
  }

  private withTimeout<T>(promise: Promise<T>, operation: LimiterUnavailableError['operation']): Promise<T> {
    if (!this.timeouts) return promise;
    return this.timeouts.track(promise, () => this.timeoutError(operation));
  }

  private timeoutError(operation: LimiterUnavailableError['operation']): LimiterUnavailableError {
    return new LimiterUnavailableError(operation, `no reply within ${this.timeoutMs} ms`);
  }
}

function numberOrNull(text: string): number | null {
  return text === '' ? null : Number(text);
}
