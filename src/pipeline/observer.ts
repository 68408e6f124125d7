import type { Batch } from 'kafkajs';
import type { NotificationEvent, Platform } from '../events/event.ts';
import type { PoolBucket, TokenPool } from '../limiter/token-pool.ts';
import type { PushOutcome, PushRequest } from '../providers/types.ts';
import type { Item } from './item.ts';

/** Where a token take happens: the partition, and the items it is for, in the order they are granted. */
export interface AcquireContext {
  topic: string;
  partition: number;
  /** The items that want a token each; when `granted` is less, the first `granted` of them are sent. */
  items: readonly Item[];
}

/** One provider send: its requests, and the items they came from (same order). */
export interface SendContext {
  platform: Platform;
  requests: readonly PushRequest[];
  items: readonly Item[];
}

/** One acquire from the Redis bucket on behalf of a whole process's pool (see TokenPool). */
export interface PoolAcquire {
  requested: number;
  granted: number;
  waitMs: number;
  /** Tokens left in the first (provider) bucket after the acquire, when the limiter said. */
  tokensLeft?: number;
}

/**
 * What the pipeline tells the outside world (metrics, traces, logs) as it works. Every hook is optional
 * and synchronous except the two wrappers, `acquire` and `send`, which wrap the token take and the
 * provider call so that a tracer can put spans around them; each must call its function exactly once
 * and return its result. The pipeline never depends on what an observer does.
 */
export interface PipelineObserver {
  acquire(
    pool: TokenPool,
    requested: number,
    take: () => Promise<number>,
    context: AcquireContext,
  ): Promise<number>;
  send(context: SendContext, send: () => Promise<PushOutcome[]>): Promise<PushOutcome[]>;
  /** A message was read for the first time by this partition state (not again after a pause). */
  received?(item: Item, topic: string, partition: number): void;
  /** These items' outcomes are recorded (outcome topics written, done-marks set): they are finished. */
  settled?(items: readonly Item[], topic: string, partition: number): void;
  /** A batch handler returned; `unfinished` of its messages still wait (paused, or stopped). */
  batchDone?(batch: Batch, unfinished: number): void;
  /** The partition's state was dropped (rebalance, shutdown): its unfinished items will be read again. */
  released?(topic: string, partition: number): void;
  outcome?(event: NotificationEvent, outcome: PushOutcome, item: Item): void;
  retried?(outcome: PushOutcome, event: NotificationEvent): void;
  /** Held back for a device the provider throttled on its own: on the retry topic, due at `notBefore`. */
  deferred?(event: NotificationEvent, item: Item, notBefore: number): void;
  /** Of a tenant over its fair share: parked on the deferred topic, to be read back as its share allows. */
  parked?(event: NotificationEvent, item: Item): void;
  deadLettered?(reasonKind: string, item: Item): void;
  duplicateSkipped?(item: Item): void;
  paused?(topic: string, partition: number, expectedWaitMs: number): void;
  resumed?(topic: string, partition: number, pausedMs: number): void;
  /** A pool of this process took tokens from the shared bucket (one Redis call). */
  poolAcquired?(buckets: readonly PoolBucket[], acquire: PoolAcquire): void;
  limiterError?(error: unknown): void;
  /** A batch step failed for a reason other than Kafka's own (Redis down, a topic not writable). */
  stepFailed?(error: unknown, topic: string, partition: number): void;
  /** Done-marks could not be written (the events are finished all the same). */
  markFailed?(error: unknown, count: number): void;
}

export const noopObserver: PipelineObserver = {
  acquire: (_pool, _requested, take) => take(),
  send: (_context, send) => send(),
};
