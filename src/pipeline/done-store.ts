import type { RedisClient } from '../redis/client.ts';
import { toScriptError } from '../redis/script-errors.ts';
import {
  defineScripts,
  replyFields,
  type ScriptCall,
  type ScriptName,
  scriptCall,
} from '../redis/scripts.ts';

/** The outcomes that end an event for good (a `retry` does not: the retried copy carries on). */
export type FinalOutcome = 'delivered' | 'dead-lettered' | 'invalid-token';

/** How many recently marked ids a process remembers (a few minutes of traffic at full rate). */
const RECENT_LIMIT = 200_000;

/** One done-* script call, its errors mapped to ScriptArgumentError or ScriptUnavailableError. */
function doneScript(redis: RedisClient, name: ScriptName): ScriptCall {
  const call = scriptCall(redis, name);
  return (...args) =>
    call(...args).catch((error: unknown) => {
      throw toScriptError(error, name);
    });
}

/** Options of {@link DoneStore}. */
export interface DoneStoreOptions {
  /** Prefix of the done-mark keys. */
  prefix: string;
  /** How long an event stays marked (the dedupe window), in seconds. */
  ttlSeconds: number;
  /** Most keys in one script call. Default 1000. */
  maxKeysPerCall?: number;
  /**
   * How long checks wait for others to join them in one call, in ms. Default 5: the partitions of a
   * process are fetched and woken together but finish their steps a few ms apart, and at saturation one
   * call each instead of one per partition is what keeps Redis near a call per hundred pushes.
   */
  coalesceMs?: number;
  /**
   * How long marks wait for others to join them in one call, in ms. Default 50: nothing waits for a
   * mark (the step goes on, and shutdown waits for what is in flight), so a longer wait costs only the
   * span in which a crash would forget a delivery's dedupe memory (the fault benchmark's kill -9 still
   * pushes nothing twice); the windows of a process's partitions are answered a few ms apart, and
   * gathering them saves a call each.
   */
  markCoalesceMs?: number;
}

/**
 * The dedupe memory: which event ids already have a final outcome. Both directions cost one Redis
 * call for many events: the checks, and the marks, that the partitions of a process make within a few
 * milliseconds of each other go out together.
 */
export class DoneStore {
  private readonly doneCheck: ScriptCall;
  private readonly doneMark: ScriptCall;
  private readonly doneForget: ScriptCall;
  private readonly options: Required<DoneStoreOptions>;
  private readonly keyPrefix: string;
  /** Marks waiting for the next flush: keys and their outcomes, side by side. */
  private pending: { keys: string[]; outcomes: FinalOutcome[] } = { keys: [], outcomes: [] };
  /**
   * Ids this process marked recently: a second copy in reach is skipped without asking Redis. Two
   * generations of RECENT_LIMIT / 2 (the older one dropped whole when the newer fills up): evicting one
   * id at a time from the front of a Set costs ~20 µs per mark once it is full (V8 walks the deleted
   * entries on every values().next()).
   */
  private recent = new Set<string>();
  private older = new Set<string>();
  private flushing: Promise<void> | undefined;
  /** Flushes of marks not yet answered by Redis. */
  private readonly unsettled = new Set<Promise<void>>();
  private checks: Array<{
    ids: readonly string[];
    resolve: (found: Map<string, string>) => void;
    reject: (e: unknown) => void;
  }> = [];

  constructor(redis: RedisClient, options: DoneStoreOptions) {
    defineScripts(redis);
    this.doneCheck = doneScript(redis, 'doneCheck');
    this.doneMark = doneScript(redis, 'doneMark');
    this.doneForget = doneScript(redis, 'doneForget');
    this.options = { maxKeysPerCall: 1000, coalesceMs: 5, markCoalesceMs: 50, ...options };
    this.keyPrefix = `${options.prefix}:{done}:`;
  }

  /** The Redis key of an event id; a Cluster hash tag keeps all marks of one call in one slot. */
  key(id: string): string {
    return this.keyPrefix + id;
  }

  /**
   * The recorded outcome of each id that has one, asked right away: a fetched batch's check goes out
   * while kafkajs hands the process the next batches of the same fetch (decoded in the same tick), so
   * Redis answers it in the meantime instead of after all of them.
   */
  lookup(ids: readonly string[]): Promise<Map<string, string>> {
    return ids.length === 0 ? Promise.resolve(new Map()) : this.read(ids);
  }

  /** The recorded outcome of each id that has one (coalesced with other callers' checks). */
  check(ids: readonly string[]): Promise<Map<string, string>> {
    if (ids.length === 0) return Promise.resolve(new Map());
    return new Promise((resolve, reject) => {
      if (this.checks.length === 0) setTimeout(() => void this.flushChecks(), this.options.coalesceMs);
      this.checks.push({ ids, resolve, reject });
    });
  }

  private async flushChecks(): Promise<void> {
    const waiting = this.checks;
    this.checks = [];
    try {
      const ids = new Set<string>();
      for (const check of waiting) for (const id of check.ids) ids.add(id);
      const found = await this.read([...ids]);
      for (const check of waiting) check.resolve(found);
    } catch (error) {
      for (const check of waiting) check.reject(error);
    }
  }

  /** All slices at once: ioredis pipelines them on the connection, so they cost one round trip. */
  private async read(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    const calls: Array<Promise<void>> = [];
    for (let start = 0; start < ids.length; start += this.options.maxKeysPerCall) {
      const slice = ids.slice(start, start + this.options.maxKeysPerCall);
      calls.push(
        this.doneCheck(slice.length, ...slice.map((id) => this.key(id))).then((reply) => {
          replyFields(reply).forEach((value, i) => {
            const id = slice[i];
            if (value !== '' && id !== undefined) found.set(id, value);
          });
        }),
      );
    }
    await Promise.all(calls);
    return found;
  }

  /**
   * Forgets that these events were dead-lettered (marks of other outcomes stay), so that replayed
   * copies are processed rather than skipped as duplicates. Resolves with the number forgotten.
   */
  async forgetDeadLettered(ids: readonly string[]): Promise<number> {
    let removed = 0;
    for (let start = 0; start < ids.length; start += this.options.maxKeysPerCall) {
      const slice = ids.slice(start, start + this.options.maxKeysPerCall);
      removed += Number(await this.doneForget(slice.length, ...slice.map((id) => this.key(id))));
    }
    return removed;
  }

  /** True when this process itself marked `id` recently. */
  isDoneLocally(id: string): boolean {
    return this.recent.has(id) || this.older.has(id);
  }

  /**
   * Records final outcomes: this process knows them at once (isDoneLocally); the returned promise
   * resolves once they are in Redis (coalesced with other callers' marks).
   */
  mark(entries: ReadonlyArray<{ key: string; outcome: FinalOutcome }>): Promise<void> {
    if (entries.length === 0) return Promise.resolve();
    for (const { key, outcome } of entries) {
      this.pending.keys.push(this.key(key));
      this.pending.outcomes.push(outcome);
      this.remember(key);
    }
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

  /** Resolves once every mark made so far has landed in Redis or failed (never rejects). */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.unsettled]);
  }

  private remember(id: string): void {
    this.recent.add(id);
    if (this.recent.size >= RECENT_LIMIT / 2) {
      this.older = this.recent;
      this.recent = new Set();
    }
  }

  private async flush(): Promise<void> {
    const { keys, outcomes } = this.pending;
    this.pending = { keys: [], outcomes: [] };
    this.flushing = undefined;
    const calls: Array<Promise<unknown>> = [];
    for (let start = 0; start < keys.length; start += this.options.maxKeysPerCall) {
      const end = start + this.options.maxKeysPerCall;
      const slice = keys.slice(start, end);
      calls.push(
        this.doneMark(slice.length, ...slice, this.options.ttlSeconds, ...outcomes.slice(start, end)),
      );
    }
    await Promise.all(calls);
  }
}
