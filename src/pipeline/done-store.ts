import { setTimeout as sleep } from 'node:timers/promises';
import { CallTimeouts } from '../limiter/timeouts.ts';
import type { RedisClient } from '../redis/client.ts';
import { ScriptUnavailableError, toScriptError } from '../redis/script-errors.ts';
import {
  defineScripts,
  replyFields,
  type ScriptArgument,
  type ScriptCall,
  type ScriptName,
  scriptCall,
} from '../redis/scripts.ts';
import { asIdempotencyKey, type IdempotencyKey, type KeyInput } from './idempotency-key.ts';
import { RecentKeys } from './recent-keys.ts';

/** The outcomes that end an event for good (a `retry` does not: the retried copy carries on). */
export type FinalOutcome = 'delivered' | 'dead-lettered' | 'invalid-token';

/** A partition as the dedupe memory names it. */
export interface PartitionRef {
  topic: string;
  partition: number;
}

/**
 * A partition whose finished offsets are read, and the first offset its reader reads in this
 * assignment: offsets finished above a commit higher than that were finished in another history (the
 * group's offsets were reset, or the topic recreated), and are dropped rather than skipped.
 */
export interface FinishedRead extends PartitionRef {
  from?: string | undefined;
}

/**
 * What finishing one message leaves behind: its offset, for a redelivery of the same message, and, for
 * an event with a final outcome, its idempotency key, for a second copy of the event.
 */
export interface DoneMark extends PartitionRef {
  offset: string;
  final?: FinalMark | undefined;
}

/** An event's idempotency key (Item.dedupeKey) and its final outcome. */
export interface FinalMark {
  key: KeyInput;
  outcome: FinalOutcome;
}

/** What an earlier reading finished, as a lookup found it. */
export interface DoneReading {
  /** Idempotency keys (their text) remembered by the window, with their outcome. */
  done: Map<string, FinalOutcome>;
  /** Per partition asked for (`topic:partition`), its offsets finished above the committed one. */
  finished: Map<string, Set<string>>;
}

/** How many recently marked keys a process remembers (a few minutes of traffic at full rate). */
const RECENT_LIMIT = 200_000;

/**
 * Hash tags the dedupe memory spreads over, `{d0}` to `{d2}`: the window's shards and the partitions'
 * finished offsets share them, so that on a Redis Cluster a lookup, and a flush of marks, is one call
 * per tag (at most three) whatever the partitions and events. Each call costs a round trip, so the
 * tags are few; these three fall on the three masters of an evenly split three-master cluster (CRC16
 * slots 12733, 8604 and 4607), and a larger cluster holds the dedupe memory on three of its masters.
 */
const DEDUPE_TAGS = 3;

/** Most window shards in one script call (two keys each). */
const SHARDS_PER_CALL = 500;

const OUTCOME_BYTE: Record<FinalOutcome, number> = {
  delivered: 'd'.charCodeAt(0),
  'dead-lettered': 'x'.charCodeAt(0),
  'invalid-token': 'i'.charCodeAt(0),
};
const OUTCOME_OF_BYTE: Record<string, FinalOutcome> = {
  d: 'delivered',
  x: 'dead-lettered',
  i: 'invalid-token',
};

/** Options of {@link DoneStore}. */
export interface DoneStoreOptions {
  /** Prefix of the keys. */
  prefix: string;
  /** The consumer group: offsets are finished, and committed, per group. */
  groupId: string;
  /**
   * How long a final outcome is remembered by (tenant, id), so that a second copy of an event published
   * again is skipped, in seconds: at least this long and at most twice. 0 turns the window off: then only
   * redeliveries of the same message (a crash, a rebalance) are recognized.
   */
  windowSeconds: number;
  /**
   * Shards of the window. Default 8192. A lookup scans its shard's string, so a shard should hold at
   * most some ten thousand events per window: shards ≥ events per window ÷ 10 000.
   */
  shards?: number;
  /** A partition's finished-offset set expires after this long without a mark, in seconds. Default 7 days. */
  finishedTtlSeconds?: number;
  /**
   * How long checks wait for others to join them in one call, in ms. Default 5: the partitions of a
   * process finish their steps a few ms apart.
   */
  coalesceMs?: number;
  /**
   * How long marks wait for others to join them in one call, in ms. Default 50: nothing waits for a
   * mark (the step goes on, and shutdown waits for what is in flight), so a longer wait costs only the
   * span in which a crash would forget what it finished; gathering the partitions' marks saves a call
   * each.
   */
  markCoalesceMs?: number;
  /**
   * A call Redis has not answered within this many ms fails (ScriptUnavailableError), in ms. Default
   * 5000; 0: no timeout. While Redis is unreachable ioredis holds calls until its next flush of the
   * queue, every third reconnect attempt (seconds apart, far longer when each attempt waits out a
   * connect timeout); a step waiting on one holds its partition, and shutdown waits for the step.
   * A lookup answered late is ignored; a mark that lands late is still true.
   */
  timeoutMs?: number;
  /**
   * How long a flush of marks that Redis refused (ScriptUnavailableError) is sent again, in ms, before
   * its marks are given up; a flush waits for an answer for this long, or `timeoutMs` if longer.
   * Default 30 000; 0: sent once. A Redis Cluster refuses calls for
   * seconds while losing nothing: through a failover (until a replica has taken over the master's
   * slots: Redis' default cluster-node-timeout is 15 s) and while a slot moves between masters
   * (TRYAGAIN, as long as a call's keys are split between them). A mark given up leaves the event's key
   * out of the window and its offset out of the finished set.
   */
  markRetryMs?: number;
}

/** What the next flush writes for one partition: the offsets finished, and Kafka's latest commit. */
interface PendingPartition {
  ref: PartitionRef;
  committed: string;
  offsets: string[];
}

/** The keys and arguments of one script call, all in one Redis Cluster slot (or on one server). */
interface CallPlan {
  partitions: Array<{ ref: FinishedRead; key: string }>;
  shards: number[];
}

/**
 * The dedupe memory, in two parts with two jobs:
 *
 * - **Finished offsets**, per partition: what finished above the committed offset, out of order. A
 *   redelivery (a crash, a rebalance) re-reads from the commit and skips these. Kafka's commit says the
 *   rest: a commit trims the set below it, so the set holds only work in flight.
 * - **The idempotency window**, by (tenant, id): the final outcomes of the last `windowSeconds`, 9 bytes
 *   each, so that a second copy of an event (a producer's retry) is skipped. See lua/includes/window.lua.
 *
 * Both directions cost one Redis call for many events (one per slot on a Redis Cluster): the checks of
 * a fetched batch, and the marks the partitions of a process make within a few ms of each other.
 */
export class DoneStore {
  private readonly redis: RedisClient;
  private readonly dedupeCheck: ScriptCall;
  private readonly dedupeMark: ScriptCall;
  private readonly dedupeForget: ScriptCall;
  private readonly options: Required<DoneStoreOptions>;
  /** Marks and trims waiting for the next flush, per partition key. */
  private pendingPartitions = new Map<string, PendingPartition>();
  /** Window entries waiting for the next flush, per shard: key and outcome byte. */
  private pendingEntries = new Map<number, Array<{ key: IdempotencyKey; outcome: number }>>();
  /** Keys this process marked recently: a second copy in reach is skipped without asking Redis. */
  private readonly recent = new RecentKeys(RECENT_LIMIT);
  private flushing: Promise<void> | undefined;
  /** Flushes not yet answered by Redis. */
  private readonly unsettled = new Set<Promise<void>>();
  private checks: Array<{
    keys: readonly KeyInput[];
    partitions: readonly FinishedRead[];
    resolve: (reading: DoneReading) => void;
    reject: (e: unknown) => void;
  }> = [];

  constructor(redis: RedisClient, options: DoneStoreOptions) {
    defineScripts(redis);
    this.redis = redis;
    this.options = {
      shards: 8192,
      finishedTtlSeconds: 7 * 86_400,
      coalesceMs: 5,
      markCoalesceMs: 50,
      timeoutMs: 5000,
      markRetryMs: 30_000,
      ...options,
    };
    if (!Number.isInteger(this.options.shards) || this.options.shards < 1)
      throw new RangeError(`shards must be an integer >= 1, got ${this.options.shards}`);
    const { timeoutMs } = this.options;
    if (!(timeoutMs >= 0 && timeoutMs <= 2_147_483_647))
      throw new RangeError(`timeoutMs must be a number of ms in [0, 2^31 - 1], got ${timeoutMs}`);
    this.dedupeCheck = mappedErrors(redis, 'dedupeCheck', timeoutMs);
    // A mark's wait is bounded by markRetried, which never sends a call again while one is unanswered.
    this.dedupeMark = mappedErrors(redis, 'dedupeMark', 0);
    this.dedupeForget = mappedErrors(redis, 'dedupeForget', timeoutMs);
  }

  /** True when the idempotency window is on. */
  get windowOn(): boolean {
    return this.options.windowSeconds > 0;
  }

  /** The Redis key of a partition's finished-offset set. */
  partitionKey(ref: PartitionRef): string {
    return `${this.options.prefix}:{d${ref.partition % DEDUPE_TAGS}}:finished:${ref.topic}:${ref.partition}:${this.options.groupId}`;
  }

  /** The Redis key of one window shard. */
  shardKey(shard: number): string {
    return `${this.options.prefix}:{d${shard % DEDUPE_TAGS}}:window:${shard}`;
  }

  /**
   * What earlier readings finished: the window's outcome of each key, and the finished offsets of each
   * partition given (read once per assignment). On one server asked right away: a fetched batch's check
   * goes out while kafkajs hands the process the next batches of the same fetch.
   */
  lookup(keys: readonly KeyInput[], partitions: readonly FinishedRead[] = []): Promise<DoneReading> {
    // On a Cluster a lookup costs a call per tag it touches; the batches of one fetch, a few ms apart,
    // share those calls instead.
    return this.redis.isCluster ? this.check(keys, partitions) : this.read(keys, partitions);
  }

  /** As {@link lookup}, coalesced with other callers' checks of the next few ms. */
  check(keys: readonly KeyInput[], partitions: readonly FinishedRead[] = []): Promise<DoneReading> {
    return new Promise((resolve, reject) => {
      if (this.checks.length === 0) setTimeout(() => void this.flushChecks(), this.options.coalesceMs);
      this.checks.push({ keys, partitions, resolve, reject });
    });
  }

  /** True when this process itself marked `key` final recently (and the window is on). */
  isDoneLocally(key: KeyInput): boolean {
    return this.windowOn && this.recent.has(asIdempotencyKey(key));
  }

  /**
   * Records finished messages: this process knows their final keys at once (isDoneLocally); the
   * returned promise resolves once they are in Redis (coalesced with other callers' marks).
   */
  mark(marks: readonly DoneMark[]): Promise<void> {
    if (marks.length === 0) return Promise.resolve();
    let pending: PendingPartition | undefined;
    for (const mark of marks) {
      // A call's marks are nearly always of one partition: its entry is looked up once.
      if (pending?.ref.partition !== mark.partition || pending.ref.topic !== mark.topic)
        pending = this.pendingPartition(mark);
      pending.offsets.push(mark.offset);
      if (mark.final && this.windowOn) {
        const key = asIdempotencyKey(mark.final.key);
        const shard = this.shardOf(key);
        const entry = { key, outcome: OUTCOME_BYTE[mark.final.outcome] };
        const entries = this.pendingEntries.get(shard);
        if (entries) entries.push(entry);
        else this.pendingEntries.set(shard, [entry]);
        this.recent.add(key);
      }
    }
    return this.scheduleFlush();
  }

  /**
   * Kafka committed `offset` (the next to read) for a partition: its finished offsets below it are
   * removed with the next flush, which this schedules when none is due.
   */
  committed(ref: PartitionRef, offset: string): void {
    this.pendingPartition(ref).committed = offset;
    void this.scheduleFlush().catch(() => {}); // a trim that fails is retried by the next commit's
  }

  /** Resolves once every mark made so far has landed in Redis or failed (never rejects). */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.unsettled]);
  }

  /**
   * Forgets that these events were dead-lettered (other outcomes stay), so that replayed copies are
   * processed rather than skipped as second copies. Resolves with the number forgotten.
   */
  async forgetDeadLettered(keys: readonly KeyInput[]): Promise<number> {
    if (!this.windowOn || keys.length === 0) return 0;
    const byShard = this.byShard(keys);
    let forgotten = 0;
    for (const plan of this.plans([], [...byShard.keys()])) {
      const { counts, blob } = this.fingerprintBlob(plan.shards, byShard);
      const keysOf = plan.shards.map((shard) => this.shardKey(shard));
      forgotten += Number(
        await this.dedupeForget(keysOf.length, ...keysOf, this.options.windowSeconds, counts, blob),
      );
    }
    return forgotten;
  }

  /** The window shard a key falls in. */
  private shardOf(key: IdempotencyKey): number {
    return key.spread % this.options.shards;
  }

  /**
   * Keys by the shard their fingerprint falls in. A key given twice is asked for twice (both get the
   * same answer): rarer than what telling them apart would cost every key.
   */
  private byShard(keys: Iterable<KeyInput>): Map<number, IdempotencyKey[]> {
    const byShard = new Map<number, IdempotencyKey[]>();
    for (const input of keys) {
      const key = asIdempotencyKey(input);
      const shard = this.shardOf(key);
      const list = byShard.get(shard);
      if (list) list.push(key);
      else byShard.set(shard, [key]);
    }
    return byShard;
  }

  /** The scripts' shard arguments: a count per shard, and all fingerprints in one string, shard by shard. */
  private fingerprintBlob(
    shards: readonly number[],
    byShard: Map<number, IdempotencyKey[]>,
  ): { counts: string; blob: Buffer; keys: IdempotencyKey[] } {
    const lists = shards.map((shard) => byShard.get(shard) ?? []);
    const blob = Buffer.allocUnsafe(8 * lists.reduce((n, list) => n + list.length, 0));
    const keys: IdempotencyKey[] = [];
    let at = 0;
    for (const list of lists)
      for (const key of list) {
        blob.writeUInt32BE(key.high, at);
        blob.writeUInt32BE(key.low, at + 4);
        at += 8;
        keys.push(key);
      }
    return { counts: lists.map((list) => list.length).join(','), blob, keys };
  }

  /**
   * The calls that cover these partitions and shards: one on a single server (a script may touch any
   * key there); on a Redis Cluster one per hash tag, since a script call must stay in one slot.
   */
  private plans(partitions: readonly FinishedRead[], shards: readonly number[]): CallPlan[] {
    const withKeys = partitions.map((ref) => ({ ref, key: this.partitionKey(ref) }));
    const plans: CallPlan[] = [];
    if (!this.redis.isCluster) {
      for (let start = 0; start < Math.max(shards.length, 1); start += SHARDS_PER_CALL)
        plans.push({
          partitions: start === 0 ? withKeys : [],
          shards: shards.slice(start, start + SHARDS_PER_CALL),
        });
      return plans.filter((plan) => plan.partitions.length > 0 || plan.shards.length > 0);
    }
    const byTag = new Map<number, CallPlan>();
    const planOf = (tag: number): CallPlan => {
      let plan = byTag.get(tag);
      if (!plan) {
        plan = { partitions: [], shards: [] };
        byTag.set(tag, plan);
      }
      return plan;
    };
    for (const entry of withKeys) planOf(entry.ref.partition % DEDUPE_TAGS).partitions.push(entry);
    for (const shard of shards) planOf(shard % DEDUPE_TAGS).shards.push(shard);
    for (const plan of byTag.values())
      for (let start = 0; start < Math.max(plan.shards.length, 1); start += SHARDS_PER_CALL)
        plans.push({
          partitions: start === 0 ? plan.partitions : [],
          shards: plan.shards.slice(start, start + SHARDS_PER_CALL),
        });
    return plans;
  }

  private async read(keys: readonly KeyInput[], partitions: readonly FinishedRead[]): Promise<DoneReading> {
    const reading: DoneReading = { done: new Map(), finished: new Map() };
    const byShard = this.windowOn ? this.byShard(keys) : new Map<number, IdempotencyKey[]>();
    const calls = this.plans(partitions, [...byShard.keys()]).map(async (plan) => {
      const { counts, blob, keys: asked } = this.fingerprintBlob(plan.shards, byShard);
      const redisKeys = [
        ...plan.partitions.map(({ key }) => key),
        ...plan.shards.map((shard) => this.shardKey(shard)),
      ];
      const reply = await this.dedupeCheck(
        redisKeys.length,
        ...redisKeys,
        plan.partitions.length,
        Math.max(this.options.windowSeconds, 1),
        counts,
        blob,
        ...plan.partitions.map(({ ref }) => ref.from ?? ''),
      );
      const fields = replyFields(reply);
      plan.partitions.forEach(({ ref }, i) => {
        const text = fields[i] ?? '';
        reading.finished.set(`${ref.topic}:${ref.partition}`, new Set(text === '' ? [] : text.split(',')));
      });
      const outcomes = fields[plan.partitions.length] ?? '';
      asked.forEach((key, j) => {
        const outcome = OUTCOME_OF_BYTE[outcomes[j] ?? '-'];
        if (outcome) reading.done.set(key.text, outcome);
      });
    });
    await Promise.all(calls);
    return reading;
  }

  private async flushChecks(): Promise<void> {
    const waiting = this.checks;
    this.checks = [];
    try {
      const keys = new Set<KeyInput>();
      const partitions = new Map<string, FinishedRead>();
      for (const check of waiting) {
        for (const key of check.keys) keys.add(key);
        for (const ref of check.partitions) {
          const key = `${ref.topic}:${ref.partition}`;
          if (ref.from !== undefined || !partitions.has(key)) partitions.set(key, ref);
        }
      }
      const reading = await this.read([...keys], [...partitions.values()]);
      for (const check of waiting) check.resolve(reading);
    } catch (error) {
      for (const check of waiting) check.reject(error);
    }
  }

  private pendingPartition(ref: PartitionRef): PendingPartition {
    const key = `${ref.topic}:${ref.partition}`;
    let pending = this.pendingPartitions.get(key);
    if (!pending) {
      pending = { ref: { topic: ref.topic, partition: ref.partition }, committed: '', offsets: [] };
      this.pendingPartitions.set(key, pending);
    }
    return pending;
  }

  private scheduleFlush(): Promise<void> {
    if (!this.flushing) {
      const flushing = new Promise<void>((resolve) => setTimeout(resolve, this.options.markCoalesceMs)).then(
        () => this.flush(),
      );
      this.flushing = flushing;
      this.unsettled.add(flushing);
      const forget = () => this.unsettled.delete(flushing);
      flushing.then(forget, forget);
    }
    return this.flushing;
  }

  private async flush(): Promise<void> {
    const partitions = this.pendingPartitions;
    const entries = this.pendingEntries;
    this.pendingPartitions = new Map();
    this.pendingEntries = new Map();
    this.flushing = undefined;
    const pendingOf = new Map([...partitions.values()].map((p) => [this.partitionKey(p.ref), p]));
    const calls = this.plans(
      [...partitions.values()].map((p) => p.ref),
      [...entries.keys()],
    ).map((plan) => {
      const lists = plan.shards.map((shard) => entries.get(shard) ?? []);
      const blob = Buffer.allocUnsafe(9 * lists.reduce((n, list) => n + list.length, 0));
      let at = 0;
      for (const list of lists)
        for (const { key, outcome } of list) {
          blob.writeUInt32BE(key.high, at);
          blob.writeUInt32BE(key.low, at + 4);
          blob[at + 8] = outcome;
          at += 9;
        }
      const args: ScriptArgument[] = [plan.partitions.length + plan.shards.length];
      for (const { key } of plan.partitions) args.push(key);
      for (const shard of plan.shards) args.push(this.shardKey(shard));
      args.push(
        plan.partitions.length,
        Math.max(this.options.windowSeconds, 1),
        this.options.finishedTtlSeconds,
      );
      for (const { key } of plan.partitions) {
        const pending = pendingOf.get(key);
        args.push(pending?.committed ?? '', pending?.offsets.join(',') ?? '');
      }
      args.push(lists.map((list) => list.length).join(','), blob);
      return this.markRetried(args);
    });
    // Every call ends (lands or gives up) before the flush does: settled() promises a hand-over that.
    const failed = (await Promise.allSettled(calls)).find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * One mark call, sent again after 0.1 s, doubling to 2 s, while Redis refuses it, until `markRetryMs`
   * has passed. A call is sent again only once it was answered: a call that timed out may still be
   * queued and run, and copies sent meanwhile would all land. Sending one twice is harmless anyway: an
   * offset is added to a set, and an entry the window holds twice answers the same. A flush that lands
   * after a later one cannot take a set's commit back, nor add offsets that commit has passed
   * (dedupe-mark.lua keeps the higher one). The waits do not keep the process alive: a process that has
   * let Redis go exits.
   */
  private async markRetried(args: readonly ScriptArgument[]): Promise<void> {
    const started = Date.now();
    const { timeoutMs, markRetryMs } = this.options;
    const waitMs = timeoutMs === 0 ? Number.POSITIVE_INFINITY : Math.max(timeoutMs, markRetryMs);
    for (let delayMs = 100; ; delayMs = Math.min(delayMs * 2, 2000)) {
      let unanswered = false;
      try {
        await answeredBy(this.dedupeMark(...args), started + waitMs, () => {
          unanswered = true;
          return new ScriptUnavailableError('dedupeMark', `no reply within ${waitMs} ms`);
        });
        return;
      } catch (error) {
        const refused = error instanceof ScriptUnavailableError && !unanswered;
        if (!refused || Date.now() + delayMs > started + markRetryMs) throw error;
      }
      await sleep(delayMs, undefined, { ref: false });
    }
  }
}

/** `answer`, or a rejection with `expired()` if it has not settled by `deadline` (epoch ms; Infinity: none). */
function answeredBy<T>(answer: Promise<T>, deadline: number, expired: () => Error): Promise<T> {
  if (deadline === Number.POSITIVE_INFINITY) return answer;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(expired()), Math.max(0, deadline - Date.now()));
    timer.unref();
    answer.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/**
 * One script call, its errors mapped to ScriptArgumentError or ScriptUnavailableError, and a call not
 * answered within `timeoutMs` (0: no timeout) failed as unavailable.
 */
function mappedErrors(redis: RedisClient, name: ScriptName, timeoutMs: number): ScriptCall {
  const call = scriptCall(redis, name);
  const timeouts = timeoutMs > 0 ? new CallTimeouts(timeoutMs) : undefined;
  const timedOut = () => new ScriptUnavailableError(name, `no reply within ${timeoutMs} ms`);
  return (...args) => {
    const answer = call(...args);
    return (timeouts ? timeouts.track(answer, timedOut) : answer).catch((error: unknown) => {
      throw toScriptError(error, name);
    });
  };
}
