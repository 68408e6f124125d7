import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';

/** The outcomes that end an event for good (a `retry` does not: the retried copy carries on). */
export type FinalOutcome = 'delivered' | 'dead-lettered' | 'invalid-token';

/** How many recently marked ids a process remembers (a few minutes of traffic at full rate). */
const RECENT_LIMIT = 200_000;

const script = (name: string) => readFileSync(new URL(`../../lua/${name}.lua`, import.meta.url), 'utf8');

interface DoneCommands {
  aqDoneCheck(...args: [number, ...string[]]): Promise<string[]>;
  aqDoneMark(...args: [number, ...Array<string | number>]): Promise<number>;
  aqDoneForget(...args: [number, ...string[]]): Promise<number>;
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
   * How long checks and marks wait for others to join them in one call, in ms. Default 5: the partitions
   * of a process are fetched and woken together but finish their steps a few ms apart, and at saturation
   * one call each instead of one per partition is what keeps Redis near a call per hundred pushes.
   */
  coalesceMs?: number;
}

/**
 * The dedupe memory: which event ids already have a final outcome. Both directions cost one Redis
 * call for many events: the checks, and the marks, that the partitions of a process make within a few
 * milliseconds of each other go out together.
 */
export class DoneStore {
  private readonly redis: Redis & DoneCommands;
  private readonly options: Required<DoneStoreOptions>;
  private pending: Array<{ key: string; outcome: FinalOutcome }> = [];
  /** Ids this process marked recently: a second copy in reach is skipped without asking Redis. */
  private readonly recent = new Set<string>();
  private flushing: Promise<void> | undefined;
  private checks: Array<{
    ids: readonly string[];
    resolve: (found: Map<string, string>) => void;
    reject: (e: unknown) => void;
  }> = [];

  constructor(redis: Redis, options: DoneStoreOptions) {
    redis.defineCommand('aqDoneCheck', { lua: script('done-check') });
    redis.defineCommand('aqDoneMark', { lua: script('done-mark') });
    redis.defineCommand('aqDoneForget', { lua: script('done-forget') });
    this.redis = redis as Redis & DoneCommands;
    this.options = { maxKeysPerCall: 1000, coalesceMs: 5, ...options };
  }

  /** The Redis key of an event id; a Cluster hash tag keeps all marks of one call in one slot. */
  key(id: string): string {
    return `${this.options.prefix}:{done}:${id}`;
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
      const found = await this.read([...new Set(waiting.flatMap((c) => c.ids))]);
      for (const check of waiting) check.resolve(found);
    } catch (error) {
      for (const check of waiting) check.reject(error);
    }
  }

  private async read(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    for (let start = 0; start < ids.length; start += this.options.maxKeysPerCall) {
      const slice = ids.slice(start, start + this.options.maxKeysPerCall);
      const values = await this.redis.aqDoneCheck(slice.length, ...slice.map((id) => this.key(id)));
      values.forEach((value, i) => {
        const id = slice[i];
        if (value !== '' && id !== undefined) found.set(id, value);
      });
    }
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
      removed += await this.redis.aqDoneForget(slice.length, ...slice.map((id) => this.key(id)));
    }
    return removed;
  }

  /** True when this process itself marked `id` recently. */
  isDoneLocally(id: string): boolean {
    return this.recent.has(id);
  }

  /** Records final outcomes; resolves once they are in Redis (coalesced with other callers' marks). */
  mark(entries: ReadonlyArray<{ id: string; outcome: FinalOutcome }>): Promise<void> {
    if (entries.length === 0) return Promise.resolve();
    for (const { id, outcome } of entries) {
      this.pending.push({ key: this.key(id), outcome });
      this.remember(id);
    }
    if (!this.flushing) {
      this.flushing = new Promise<void>((resolve) => setTimeout(resolve, this.options.coalesceMs)).then(() =>
        this.flush(),
      );
    }
    return this.flushing;
  }

  private remember(id: string): void {
    this.recent.add(id);
    if (this.recent.size > RECENT_LIMIT) {
      const oldest = this.recent.values().next().value;
      if (oldest !== undefined) this.recent.delete(oldest);
    }
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    this.flushing = undefined;
    for (let start = 0; start < batch.length; start += this.options.maxKeysPerCall) {
      const slice = batch.slice(start, start + this.options.maxKeysPerCall);
      await this.redis.aqDoneMark(
        slice.length,
        ...slice.map((e) => e.key),
        this.options.ttlSeconds,
        ...slice.map((e) => e.outcome),
      );
    }
  }
}
