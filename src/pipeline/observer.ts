import type { NotificationEvent } from '../events/event.ts';
import type { PushOutcome } from '../providers/types.ts';
import type { Item } from './partition-state.ts';
import type { TokenPool } from './token-pool.ts';

/**
 * What the pipeline tells the outside world (metrics, traces, logs) as it works. Every hook is
 * optional and synchronous except `acquire`, which wraps the token take so that a tracer can put a
 * span around it. The pipeline never depends on what an observer does.
 */
export interface PipelineObserver {
  acquire(pool: TokenPool, requested: number, take: () => Promise<number>): Promise<number>;
  outcome?(event: NotificationEvent, outcome: PushOutcome, item: Item): void;
  retried?(outcome: PushOutcome): void;
  deadLettered?(reasonKind: string): void;
  duplicateSkipped?(item: Item): void;
  paused?(topic: string, partition: number, expectedWaitMs: number): void;
  resumed?(topic: string, partition: number, pausedMs: number): void;
  limiterError?(error: unknown): void;
}

export const noopObserver: PipelineObserver = {
  acquire: (_pool, _requested, take) => take(),
};
