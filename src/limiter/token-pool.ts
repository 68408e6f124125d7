import { randomBytes } from 'node:crypto';
import { timerDelayMs } from '../timer-delay.ts';
/**
 * One process's share of a token bucket group (a provider's bucket, plus a tenant's when the event has
 * one). All partitions of the process draw from it, so that however many partitions are throttled,
 * the process makes ONE Redis call per refill for their combined demand, and sleeps once for all of
 * them. That is what keeps Redis traffic near one call per hundred pushes at saturation.
 *
 * - `take(n)` answers at once from tokens the process already holds; otherwise the takes of the same
 *   tick are coalesced into one acquire for their total.
 * - Tokens are taken right before their sends and given back to the window with `release` once the
 *   sends are answered: the process never holds more than `window` tokens that the provider has not
 *   seen yet (see {@link TokenPoolOptions.window}). A take that finds the window full waits for a release.
 * - When the bucket is short, the pool is "dry" until the time the limiter named; takes during that
 *   time get nothing and make no Redis call (no busy polling). Partitions that got too little register
 *   a wake-up with `whenRefilled`, pause, and are resumed when the pool has refilled, or a wake lead
 *   before (the fetch of a resumed partition takes that long): the first take of the batch that fetch
 *   brings then waits for the refill.
 */

/** The bucket(s) a pool draws from, as the limiter names them. */
export interface PoolBucket {
  name: string;
  rate: number;
  capacity: number;
}

/** What a pool needs from the limiter (src/limiter implements it over Redis). */
export interface TokenSource {
  acquire(
    buckets: PoolBucket[],
    n: number,
    options?: { waitFor?: number; holder?: string; held?: number; priority?: 'normal' | 'low' },
  ): Promise<{ granted: number; waitMs: number; tokensLeft?: number[] }>;
  /** Blocks the buckets fleet-wide for `retryAfterMs` from now (a provider's 429). */
  blockUntil(buckets: PoolBucket[], retryAfterMs: number): Promise<unknown>;
  refund(buckets: PoolBucket[], n: number, options?: { holder?: string; held?: number }): Promise<unknown>;
}

/** Options of {@link TokenPool}. */
export interface TokenPoolOptions {
  /** When throttled, wait until this many tokens can be had before asking again. */
  chunk: number;
  /**
   * Most tokens the process holds at once: taken from Redis and not yet released by the sends they were
   * taken for. Default: two chunks; the consumer sets it to its send concurrency, the requests one
   * process has in flight per provider.
   *
   * What the pool holds it reports to Redis with every acquire (as the pool's `holder`), and the
   * provider's bucket refills only up to its capacity minus what all pools hold: a token counts against
   * the provider only when its request arrives there, and the provider's bucket, when full, loses the
   * refill such tokens would have used, so Aqueduct's bucket must lose it too (see
   * lua/includes/provider-bucket.lua). The window bounds how much a report can be stale by.
   */
  window?: number;
  /**
   * After this many ms holding nothing unanswered and with nobody waiting, the pool gives back what it
   * holds and tells Redis it holds nothing (one call per idle spell), so that its last report stops
   * holding the bucket back and its turn (if it was told to come back for more) goes to others. Default
   * 1000.
   */
  idleReportMs?: number;
  /**
   * The priority of every acquire the pool makes (default `'normal'`): a `'low'` pool may take only the
   * tokens of the provider's bucket above the reserve kept for normal calls, e.g. the pool reading back
   * the parked events of tenants over their fair share (see `AcquireOptions.priority` in types.ts).
   */
  priority?: 'normal' | 'low';
  /**
   * How long before the end of a dry spell the waiting partitions are woken, in ms (default 0). A woken
   * partition takes only once it has been fetched again, which the consumer's fetch loop may do up to
   * its fetch wait later (kafkajs sleeps that long when every partition is paused); the pool's turn
   * came meanwhile, and at small bursts the bucket's refill of that lateness is lost once the bucket is
   * full. So the consumer wakes them this much early, and the first take of a fetched batch (`take`'s
   * `first`) that finds the pool dry for at most this long waits for the refill instead of getting 0.
   */
  wakeLeadMs?: number;
  /** Back-off after the limiter failed (Redis unreachable, fail-closed). Default 1000 ms. */
  failureBackoffMs?: number;
  /** Told about limiter failures (for logs and metrics). */
  onError?: (error: unknown) => void;
  /** Told about every acquire: requested, granted, wait. */
  onAcquire?: (event: { requested: number; granted: number; waitMs: number; tokensLeft?: number }) => void;
}

interface PendingTake {
  n: number;
  /** An urgent take (see `take`): served before the others. */
  urgent: boolean;
  /** Waits for a dry spell ending by then (epoch ms) instead of getting 0: urgent and first takes. */
  waitUntil: number | undefined;
  resolve: (granted: number) => void;
}

type ResolvedOptions = Required<Omit<TokenPoolOptions, 'onError' | 'onAcquire'>> &
  Pick<TokenPoolOptions, 'onError' | 'onAcquire'>;

export class TokenPool {
  readonly buckets: PoolBucket[];
  private readonly source: TokenSource;
  private readonly options: ResolvedOptions;
  /** Tokens taken from Redis and not yet handed to a partition. */
  private credit = 0;
  /** Tokens handed to partitions whose sends are not answered yet (see `release`). */
  private out = 0;
  /** Tokens asked for in acquires still on their way. */
  private asking = 0;
  private dryUntil = 0;
  private blockedUntil = 0;
  private pending: PendingTake[] = [];
  private drainScheduled = false;
  private readonly waiters = new Map<string, { need: number; wake: () => void }>();
  private wakeTimer: NodeJS.Timeout | undefined;
  /** Drains the urgent takes waiting for the dry spell's end. */
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** This pool's name among the bucket's holders: unique to it, so that its reports replace each other only. */
  readonly holder = randomBytes(6).toString('base64url');
  /** What Redis last recorded this pool as holding (an upper bound of what it holds since). */
  private reported = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  /** When the pool last handed out or got back tokens (epoch ms). */
  private lastBusy = 0;

  constructor(source: TokenSource, buckets: PoolBucket[], options: TokenPoolOptions) {
    this.source = source;
    this.buckets = buckets;
    const smallestCapacity = Math.min(...buckets.map((b) => b.capacity));
    const chunk = Math.max(1, Math.min(options.chunk, smallestCapacity));
    this.options = {
      failureBackoffMs: 1000,
      idleReportMs: 1000,
      priority: 'normal',
      wakeLeadMs: 0,
      ...options,
      chunk,
      window: Math.max(1, Math.min(options.window ?? chunk * 2, smallestCapacity)),
    };
  }

  /** The most tokens one take can get (and the process can hold unreleased). */
  get window(): number {
    return this.options.window;
  }

  /** Epoch ms until which the pool expects nothing (0 when not dry). */
  get dryUntilMs(): number {
    return this.dryUntil;
  }

  /**
   * Up to `min(n, window)` tokens: at once from credit, else from one coalesced acquire, once the window
   * has room; 0 while dry. Every token granted must be given back with `release` once its send is
   * answered (or dropped).
   *
   * An urgent take (`urgentWithinMs`) is for sends that lose their moment when they wait for the
   * partitions' wake-up: it is served before the waiting takes that are not urgent, and when the pool
   * is dry for at most `urgentWithinMs` more, it waits for the refill instead of getting 0 (and is then
   * served before the partitions that refill wakes).
   *
   * The first take of a fetched batch (`first`) waits, in arrival order, for a refill due within the
   * wake lead (see {@link TokenPoolOptions.wakeLeadMs}): its partition may have been woken that early.
   * Other takes get 0 while dry, so that the step ends and its partition pauses.
   */
  take(n: number, options: { urgentWithinMs?: number; first?: boolean } = {}): Promise<number> {
    if (n <= 0 || this.closed) return Promise.resolve(0);
    const wanted = Math.min(n, this.options.window);
    if (this.credit >= wanted && this.out + wanted <= this.options.window) {
      this.credit -= wanted;
      this.out += wanted;
      this.wokenNeed = Math.max(0, this.wokenNeed - wanted);
      return Promise.resolve(wanted);
    }
    const urgent = options.urgentWithinMs !== undefined;
    const waitWithinMs = urgent
      ? options.urgentWithinMs
      : options.first
        ? this.options.wakeLeadMs
        : undefined;
    const waitUntil = waitWithinMs === undefined ? undefined : Date.now() + waitWithinMs;
    return new Promise((resolve) => {
      const take: PendingTake = { n: wanted, urgent, waitUntil, resolve };
      const behind = urgent ? this.pending.findIndex((waiting) => !waiting.urgent) : -1;
      if (behind === -1) this.pending.push(take);
      else this.pending.splice(behind, 0, take);
      this.scheduleDrain();
    });
  }

  /** The sends of `n` taken tokens are answered (or will not happen): their room in the window is free. */
  release(n: number): void {
    this.out = Math.max(0, this.out - n);
    this.lastBusy = Date.now();
    if (this.pending.length > 0) this.scheduleDrain();
    else if (this.out === 0) this.armIdleReport();
  }

  /**
   * Calls `wake` once, when the pool has refilled enough to serve some of `need` (the partition then
   * resumes and takes). A later registration under the same key replaces the earlier one.
   */
  whenRefilled(key: string, need: number, wake: () => void): number {
    this.waiters.set(key, { need, wake });
    const at = Math.max(this.dryUntil, Date.now());
    this.armWakeTimer(this.dryUntil - this.options.wakeLeadMs);
    return at;
  }

  /** Forgets a waiter (its partition was revoked or is shutting down). */
  cancel(key: string): void {
    this.waiters.delete(key);
    if (this.waiters.size === 0 && this.wakeTimer) {
      clearTimeout(this.wakeTimer);
      this.wakeTimer = undefined;
    }
  }

  /** Epoch ms until which this process last blocked the fleet (0: never). */
  get blockedUntilMs(): number {
    return this.blockedUntil;
  }

  /** The provider said "too many requests, retry after…": stop the whole fleet until then. */
  async block(untilEpochMs: number): Promise<void> {
    this.blockedUntil = Math.max(this.blockedUntil, untilEpochMs);
    this.dryUntil = Math.max(this.dryUntil, untilEpochMs);
    this.credit = 0;
    await this.source.blockUntil(this.buckets, Math.max(1, untilEpochMs - Date.now()));
  }

  /** Gives held tokens back to Redis (on shutdown) so that other instances can use them. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    if (this.refillTimer) clearTimeout(this.refillTimer);
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.waiters.clear();
    for (const take of this.pending.splice(0)) take.resolve(0);
    await this.giveBack();
  }

  /**
   * Gives the credit back and reports what is still out (nothing, once idle): one refund call, made only
   * when Redis holds a report of this pool or there is credit to return.
   */
  private async giveBack(): Promise<void> {
    const credit = this.credit;
    if (credit === 0 && this.reported === 0) return;
    this.credit = 0;
    const held = this.out + this.asking;
    this.reported = held;
    await this.source.refund(this.buckets, credit, { holder: this.holder, held }).catch(() => {});
  }

  /** Reports an idle spell (see {@link TokenPoolOptions.idleReportMs}) once it has lasted. */
  private armIdleReport(delayMs = this.options.idleReportMs): void {
    if (this.idleTimer || this.closed || (this.reported === 0 && this.credit === 0)) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      if (this.closed || this.out > 0 || this.asking > 0 || this.pending.length > 0 || this.waiters.size > 0)
        return;
      const idleFor = Date.now() - this.lastBusy;
      if (idleFor < this.options.idleReportMs) this.armIdleReport(this.options.idleReportMs - idleFor);
      else void this.giveBack();
    }, delayMs);
    this.idleTimer.unref?.();
  }

  private scheduleDrain(): void {
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    setImmediate(() => void this.drain());
  }

  /**
   * Serves waiting takes in arrival order, as many as the window has room for, from one acquire. While
   * dry every waiting take gets 0 at once (its partition pauses); takes that do not fit wait for a
   * release, and takes that come while an acquire is on its way wait for its answer.
   */
  private async drain(): Promise<void> {
    this.drainScheduled = false;
    if (this.closed || this.asking > 0) return; // the acquire on its way drains again when answered
    const dry = Date.now() < this.dryUntil;
    const room = this.options.window - this.out;
    if (!dry && room <= 0) return; // a release drains again
    const takes: PendingTake[] = [];
    const waitingForRefill: PendingTake[] = [];
    let wanted = 0;
    while (this.pending.length > 0 && (dry || wanted < room)) {
      const take = this.pending.shift() as PendingTake;
      if (dry && take.waitUntil !== undefined && this.dryUntil <= take.waitUntil) {
        waitingForRefill.push(take);
        continue;
      }
      takes.push(take);
      wanted += take.n;
    }
    if (waitingForRefill.length > 0) {
      this.pending.unshift(...waitingForRefill);
      this.armRefillTimer();
    }
    if (!dry) await this.refill(Math.min(wanted, room));
    for (const take of takes) {
      const share = Math.min(take.n, this.credit, this.options.window - this.out);
      this.credit -= share;
      this.out += share;
      this.wokenNeed = Math.max(0, this.wokenNeed - share);
      take.resolve(share);
    }
    // Takes left waiting (the window was full) are served, or told the pool is dry, on the next round
    // (urgent takes waiting for the refill, when it comes).
    if (this.pending.length > waitingForRefill.length) this.scheduleDrain();
  }

  /** Drains again when the dry spell is over, for the urgent takes that wait for it. */
  private armRefillTimer(): void {
    if (this.refillTimer || this.closed) return;
    this.refillTimer = setTimeout(
      () => {
        this.refillTimer = undefined;
        this.scheduleDrain();
      },
      timerDelayMs(this.dryUntil - Date.now()),
    );
  }

  /**
   * One acquire, unless dry or what is held covers `wanted`: for what the pool knows it needs (this
   * take or, when more, what the partitions woken last still need, plus the partitions waiting), up to
   * two chunks, so that a process draining a backlog makes one Redis call per chunk, not one per window
   * of sends.
   */
  private async refill(wanted: number): Promise<void> {
    const missing = wanted - this.credit;
    if (missing <= 0 || this.closed || Date.now() < this.dryUntil) return;
    // The takes served now are mostly the woken partitions' own: their need is counted once.
    const known = Math.max(wanted, this.wokenNeed) + this.waitingNeed();
    const need = Math.min(this.options.chunk, known);
    // Up to two chunks: what a late turn finds beyond its chunk (the refill of the time it took to come
    // back) is taken along, rather than left to pile up in the bucket until the backlog's end.
    const ask = Math.max(missing, Math.min(known, 2 * this.options.chunk) - this.credit);
    // What this pool holds besides this ask.
    const held = this.credit + this.out;
    this.asking += ask;
    this.reported = held + ask;
    try {
      // The wait is for what the pool needs up to a whole chunk, not for this take: a throttled fleet
      // then wakes for refills worth a Redis call each, instead of trickling; and at the end of a
      // backlog it does not wait for tokens nobody wants while the provider's allowance goes unused.
      const result = await this.source.acquire(this.buckets, ask, {
        waitFor: need,
        holder: this.holder,
        held,
        priority: this.options.priority,
      });
      this.credit += result.granted;
      if (result.granted < missing) this.dryUntil = Date.now() + Math.max(1, result.waitMs);
      this.options.onAcquire?.({
        requested: ask,
        granted: result.granted,
        waitMs: result.waitMs,
        ...(result.tokensLeft?.[0] !== undefined ? { tokensLeft: result.tokensLeft[0] } : {}),
      });
    } catch (error) {
      // Fail closed: nothing is sent unmetered; everyone waits and asks again after the back-off.
      this.dryUntil = Date.now() + this.options.failureBackoffMs;
      this.options.onError?.(error);
    } finally {
      this.asking -= ask;
    }
  }

  /** What the partitions woken by the last refill needed, together, less what takes got since. */
  private wokenNeed = 0;

  /** What the partitions waiting for a refill need, together. */
  private waitingNeed(): number {
    let need = 0;
    for (const waiter of this.waiters.values()) need += waiter.need;
    return need;
  }

  private armWakeTimer(at: number): void {
    if (this.wakeTimer || this.closed) return;
    // A wait beyond what a timer can arm (a block stored before blocks were bounded) wakes at the limit and asks again.
    this.wakeTimer = setTimeout(() => this.wakeWaiters(), timerDelayMs(at - Date.now()));
  }

  /**
   * Wakes every waiting partition once the dry spell is over, or ends within the wake lead (see
   * {@link TokenPoolOptions.wakeLeadMs}: their first takes then wait for it). The tokens are not taken
   * here but by the partitions themselves, right before they send: a token taken early and spent late
   * would let sends bunch up at the provider beyond what the bucket allowed. The woken partitions are fetched in one
   * response, so their takes still coalesce into one Redis call.
   */
  private wakeWaiters(): void {
    this.wakeTimer = undefined;
    if (this.closed || this.waiters.size === 0) return;
    if (Date.now() < this.dryUntil - this.options.wakeLeadMs) {
      this.armWakeTimer(this.dryUntil - this.options.wakeLeadMs);
      return;
    }
    const waiters = [...this.waiters.values()];
    this.wokenNeed = this.waitingNeed();
    this.waiters.clear();
    for (const waiter of waiters) waiter.wake();
  }
}
