import type { RedisClient } from '../redis/client.ts';
import { defineScripts, replyFields, type ScriptCall, scriptCall } from '../redis/scripts.ts';
import { execScriptCalls, type PipelinedReply } from '../redis/slot-pipelines.ts';
import { MAX_TIMER_MS } from '../timer-delay.ts';
import { LimiterArgumentError, LimiterUnavailableError, toLimiterError } from './errors.ts';
import { inspectBuckets } from './inspect.ts';
import { assertKeyPrefix, bucketKeys } from './keys.ts';
import { PreparedBucketsCache, validatedKeys } from './prepared-buckets.ts';
import { CallTimeouts } from './timeouts.ts';
import type {
  AcquireOptions,
  AcquireRequest,
  AcquireResult,
  AdaptiveRateOptions,
  BucketSpec,
  BucketState,
  FailurePolicy,
  LimiterOptions,
  RefundOptions,
  RefundResult,
} from './types.ts';

/** The scripts' `holder, held` arguments, checked. */
function holderArgs({ holder = '', held = 0 }: { holder?: string; held?: number }): [string, string] {
  if (typeof holder !== 'string') throw new LimiterArgumentError('holder', 'holder must be a string');
  if (!Number.isInteger(held) || held < 0)
    throw new LimiterArgumentError('held', `held must be an integer >= 0, got ${held}`);
  return [holder, String(held)];
}

const DEFAULTS = {
  keyPrefix: 'aqueduct',
  minTtlSeconds: 60,
  timeoutMs: 1000,
  timerSlackMs: 1,
  maxBlockMs: 60_000,
  holderLeaseMs: 60_000,
  adaptiveRate: { cut: 0.85, holdMs: 10_000, recoveryPerSecond: 0.02 },
};

/**
 * acquire.lua's `numkeys, keys, argv`: the prepared parts around the per-call `n`, `waitFor`, holder and
 * priority.
 */
type AcquireArgs = [readonly string[], string, string, readonly string[], string, string, string, string];

/** The script's `priority` argument: '' (normal, the script's cheapest case) or 'low', checked. */
function priorityArg(priority: AcquireOptions['priority']): string {
  if (priority === undefined || priority === 'normal') return '';
  if (priority === 'low') return 'low';
  throw new LimiterArgumentError('priority', `priority must be 'normal' or 'low', got ${String(priority)}`);
}

/**
 * Aqueduct's distributed token bucket: every consumer instance asks the same Redis, which refills each
 * bucket continuously by its own clock and grants whole batches (and partial batches) of tokens from
 * several buckets at once in one atomic script call. See `lua/acquire.lua` for the exact semantics.
 */
export class TokenBucketLimiter {
  readonly keyPrefix: string;
  readonly failurePolicy: FailurePolicy;
  private readonly redis: RedisClient;
  private readonly minTtlSeconds: number;
  private readonly timeoutMs: number;
  private readonly timeouts: CallTimeouts | undefined;
  private readonly timerSlackMs: number;
  private readonly maxBlockMs: number;
  private readonly leaseText: string;
  private readonly adaptiveRate: Required<AdaptiveRateOptions>;
  private readonly onFailOpen: ((error: LimiterUnavailableError) => void) | undefined;
  private readonly acquireScript: ScriptCall;
  private readonly refundScript: ScriptCall;
  private readonly blockScript: ScriptCall;
  private readonly prepared: PreparedBucketsCache;

  constructor(redis: RedisClient, options: LimiterOptions = {}) {
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
    this.prepared = new PreparedBucketsCache(this.keyPrefix, this.minTtlSeconds);
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
    this.maxBlockMs = options.maxBlockMs ?? DEFAULTS.maxBlockMs;
    if (!(this.maxBlockMs >= 0 && this.maxBlockMs <= MAX_TIMER_MS)) {
      throw new LimiterArgumentError(
        'maxBlockMs',
        `maxBlockMs must be a number of ms in [0, 2^31 - 1], got ${this.maxBlockMs}`,
      );
    }
    const lease = options.holderLeaseMs ?? DEFAULTS.holderLeaseMs;
    if (!(Number.isInteger(lease) && lease >= 1)) {
      throw new LimiterArgumentError('holderLeaseMs', `holderLeaseMs must be an integer >= 1, got ${lease}`);
    }
    this.leaseText = String(lease);
    this.adaptiveRate = { ...DEFAULTS.adaptiveRate, ...options.adaptiveRate };
    const { cut, holdMs, recoveryPerSecond } = this.adaptiveRate;
    if (!(cut > 0 && cut <= 1)) {
      throw new LimiterArgumentError(
        'adaptiveRate',
        `adaptiveRate.cut must be a number in (0, 1], got ${cut}`,
      );
    }
    if (!(Number.isInteger(holdMs) && holdMs >= 0)) {
      throw new LimiterArgumentError(
        'adaptiveRate',
        `adaptiveRate.holdMs must be an integer >= 0, got ${holdMs}`,
      );
    }
    if (!(recoveryPerSecond > 0 && Number.isFinite(recoveryPerSecond))) {
      throw new LimiterArgumentError(
        'adaptiveRate',
        `adaptiveRate.recoveryPerSecond must be a finite number > 0, got ${recoveryPerSecond}`,
      );
    }
    this.onFailOpen = options.onFailOpen;
    defineScripts(redis);
    this.acquireScript = scriptCall(redis, 'acquire');
    this.refundScript = scriptCall(redis, 'refund');
    this.blockScript = scriptCall(redis, 'block');
  }

  /** The Redis key of a bucket (see the key layout in `keys.ts` and docs/architecture.md). */
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
      const args = this.acquireArgs(buckets, n, options); // a throw here rejects
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
            resolve(this.bounded(this.acquireResult(value), buckets));
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
   * trip (on a Cluster, one per hash tag the requests touch, in parallel), each request still atomic on
   * its own. Every request is validated before anything is sent.
   * With `failurePolicy: 'closed'`, one request that Redis fails makes the whole call throw; tokens the
   * others were granted are then not used (they refill: the error is on the side of sending less).
   */
  async acquireMany(requests: AcquireRequest[]): Promise<AcquireResult[]> {
    if (!Array.isArray(requests)) throw new LimiterArgumentError('requests', 'requests must be an array');
    if (requests.length === 0) return [];
    const argsList = requests.map((request) => this.acquireArgs(request.buckets, request.n, request));
    const calls = argsList.map((args) => ({ name: 'acquire' as const, args, key: args[0][1] as string }));
    let replies: PipelinedReply[];
    try {
      replies = await this.withTimeout(execScriptCalls(this.redis, calls), 'acquire');
    } catch (error) {
      const failure = toLimiterError(error, 'acquire');
      return requests.map((request) => this.acquireFailed(failure, request.buckets, request.n));
    }
    return requests.map((request, i) => {
      const [error, reply] = replies[i] ?? [new Error('no reply'), null];
      if (error) return this.acquireFailed(toLimiterError(error, 'acquire'), request.buckets, request.n);
      return this.bounded(this.acquireResult(reply), request.buckets);
    });
  }

  /**
   * A block further out than `maxBlockMs` can only be one stored before blocks were bounded (block.lua
   * never sets one now): the wait is cut to `maxBlockMs`, and the stored deadline is cut back (a block
   * of 0 ms, which block.lua bounds like any other) so that the fleet does not wait for it for years.
   */
  private bounded(result: AcquireResult, buckets: BucketSpec[]): AcquireResult {
    const { blockedUntilMs } = result;
    if (blockedUntilMs === null || blockedUntilMs - result.serverTimeUs / 1000 <= this.maxBlockMs)
      return result;
    this.blockUntil(buckets, 0).catch(() => {});
    return { ...result, waitMs: Math.min(result.waitMs, this.maxBlockMs + this.timerSlackMs) };
  }

  /**
   * Gives `n` unused tokens back to every bucket, never above a bucket's capacity; with a `holder`, also
   * what it still holds (see {@link AcquireOptions.holder}).
   */
  async refund(buckets: BucketSpec[], n: number, options: RefundOptions = {}): Promise<RefundResult> {
    const keys = validatedKeys(this.keyPrefix, buckets);
    if (!Number.isInteger(n) || n < 0)
      throw new LimiterArgumentError('n', `n must be an integer >= 0, got ${n}`);
    const [holder, held] = holderArgs(options);
    const args: Array<string | number> = [keys.length, ...keys, n, this.minTtlSeconds];
    for (const bucket of buckets) args.push(bucket.rate, bucket.capacity);
    args.push(holder, held, this.leaseText);
    try {
      const reply = replyFields(await this.withTimeout(this.refundScript(...args), 'refund'));
      return { tokensLeft: reply.slice(1).map(Number), serverTimeUs: Number(reply[0]) };
    } catch (error) {
      throw toLimiterError(error, 'refund');
    }
  }

  /**
   * Blocks buckets fleet-wide for `retryAfterMs` from now, as measured by the Redis server's clock (so the
   * instances' clocks do not matter): pass a provider's 429 Retry-After converted to milliseconds. While
   * blocked, every acquire that includes one of these buckets gets nothing and waits until the block
   * ends. A block never shortens an existing one, and never reaches further than `maxBlockMs` from now
   * (a longer `retryAfterMs` is cut to it, and so is a block stored further out).
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
      const reply = replyFields(
        await this.withTimeout(
          this.blockScript(
            keys.length,
            ...keys,
            retryAfterMs,
            this.minTtlSeconds,
            this.maxBlockMs,
            this.adaptiveRate.cut,
            this.adaptiveRate.holdMs,
            this.adaptiveRate.recoveryPerSecond,
          ),
          'blockUntil',
        ),
      );
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
    try {
      return await inspectBuckets(this.redis, this.keyPrefix, pattern, (reply) =>
        this.withTimeout(reply, 'inspect'),
      );
    } catch (error) {
      throw toLimiterError(error, 'inspect');
    }
  }

  /** Validates an acquire (as the script would) and builds its `numkeys, keys, argv`. */
  private acquireArgs(buckets: BucketSpec[], n: number, options: AcquireOptions = {}): AcquireArgs {
    const prepared = this.prepared.prepare(buckets);
    if (!Number.isInteger(n) || n < 0)
      throw new LimiterArgumentError('n', `n must be an integer >= 0, got ${n}`);
    const { waitFor } = options;
    if (waitFor !== undefined && (!Number.isInteger(waitFor) || waitFor < 0)) {
      throw new LimiterArgumentError('waitFor', `waitFor must be an integer >= 0, got ${waitFor}`);
    }
    const [holder, held] = holderArgs(options);
    return [
      prepared.keys,
      String(n),
      waitFor === undefined ? '' : String(waitFor),
      prepared.argv,
      holder,
      held,
      this.leaseText,
      priorityArg(options.priority),
    ];
  }

  /** Parses acquire.lua's reply: 'granted waitMs blockedUntilMs nowMicros tokensLeft…'. */
  private acquireResult(text: unknown): AcquireResult {
    const reply = replyFields(text);
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
