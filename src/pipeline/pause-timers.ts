import type { TokenPool } from '../limiter/token-pool.ts';
import { timerDelayMs } from '../timer-delay.ts';
import type { PipelineObserver } from './observer.ts';

/** A partition as the pause timers know it. */
export interface PartitionRef {
  topic: string;
  partition: number;
  /** `topic:partition`: the key a pool's wake-up is registered under. */
  key: string;
}

/** What the timers pause, resume and report through. */
export interface PauseControls {
  /** Pauses and resumes a partition (the kafkajs consumer's own pause/resume). */
  pause: (topic: string, partition: number) => void;
  resume: (topic: string, partition: number) => void;
  observer: Pick<PipelineObserver, 'paused' | 'resumed'>;
}

/** Why a paused partition is woken up: the pools it waits for, and its earliest retry. */
export interface WakeReasons {
  /** Pools that granted less than the partition's items needed, with the unmet need. */
  starved: ReadonlyMap<TokenPool, number>;
  /** Epoch ms at which the earliest pending retry is due, if one is pending. */
  retryDueAt: number | undefined;
  /**
   * Epoch ms at which to read the partition again for what was appended since (see
   * BatchProcessor's READ_AGAIN_MS), if it was read to its end and another pool could send it.
   */
  readAgainAt?: number | undefined;
}

/** The back-off after failed steps in a row: 500 ms, doubling per failure, up to 10 s. */
export function backoffDelayMs(failuresInRow: number): number {
  return Math.min(10_000, 500 * 2 ** (failuresInRow - 1));
}

/** A partition held paused: what cancels its scheduled resume, and since when. */
interface Hold {
  cancel: () => void;
  pausedAt: number;
}

/**
 * The partitions this process holds paused, each with the timer (or pool wake-up) that resumes it.
 * kafkajs re-reads a resumed partition from its first unresolved offset.
 */
export class PauseTimers {
  private readonly controls: PauseControls;
  private readonly holds = new Map<string, Hold>();

  constructor(controls: PauseControls) {
    this.controls = controls;
  }

  isPaused(partition: PartitionRef): boolean {
    return this.holds.has(partition.key);
  }

  /** Partitions currently held paused. */
  count(): number {
    return this.holds.size;
  }

  /** Pauses a partition whose step failed, for `delayMs` (see backoffDelayMs). */
  pauseFor(partition: PartitionRef, delayMs: number): void {
    if (this.isPaused(partition)) return;
    const hold: Hold = { cancel: () => clearTimeout(timer), pausedAt: Date.now() };
    const timer = setTimeout(() => {
      if (this.holds.get(partition.key) !== hold) return;
      this.holds.delete(partition.key);
      this.controls.resume(partition.topic, partition.partition);
    }, timerDelayMs(delayMs));
    this.hold(partition, hold);
  }

  /**
   * Pauses the partition and schedules its resume: when the starved pools have refilled enough for
   * what waits here, or when the earliest pending retry is due, whichever comes first.
   */
  pauseUntilReady(partition: PartitionRef, reasons: WakeReasons): void {
    if (this.isPaused(partition)) return;
    const timers: NodeJS.Timeout[] = [];
    const hold: Hold = {
      cancel: () => {
        for (const timer of timers) clearTimeout(timer);
        for (const pool of reasons.starved.keys()) pool.cancel(partition.key);
      },
      pausedAt: Date.now(),
    };
    const wake = () => {
      if (this.holds.get(partition.key) !== hold) return;
      this.cancel(partition);
      this.controls.observer.resumed?.(partition.topic, partition.partition, Date.now() - hold.pausedAt);
      this.controls.resume(partition.topic, partition.partition);
    };

    let wakeAt = Number.POSITIVE_INFINITY;
    for (const [pool, need] of reasons.starved) {
      wakeAt = Math.min(wakeAt, pool.whenRefilled(partition.key, need, wake));
    }
    if (reasons.retryDueAt !== undefined) {
      wakeAt = Math.min(wakeAt, reasons.retryDueAt);
      // A retry due later than a timer can wait wakes the partition at the limit, which pauses it again.
      timers.push(setTimeout(wake, timerDelayMs(reasons.retryDueAt - Date.now())));
    }
    if (reasons.readAgainAt !== undefined && reasons.readAgainAt < wakeAt) {
      wakeAt = reasons.readAgainAt;
      timers.push(setTimeout(wake, timerDelayMs(reasons.readAgainAt - Date.now())));
    }
    if (wakeAt === Number.POSITIVE_INFINITY) {
      // Nothing to wait for (e.g. a duplicate id held back for its twin's mark): read again shortly.
      wakeAt = Date.now() + 50;
      timers.push(setTimeout(wake, 50));
    }
    this.hold(partition, hold);
    this.controls.observer.paused?.(partition.topic, partition.partition, Math.max(0, wakeAt - Date.now()));
  }

  /**
   * Cancels the partition's scheduled resume, if it is paused, and resumes it now when `unpause` is
   * true (kafkajs keeps a pause across a rebalance; a stopped kafkajs consumer refuses a resume).
   */
  release(partition: PartitionRef, unpause: boolean): void {
    if (!this.isPaused(partition)) return;
    this.cancel(partition);
    if (unpause) this.controls.resume(partition.topic, partition.partition);
  }

  private hold(partition: PartitionRef, hold: Hold): void {
    this.holds.set(partition.key, hold);
    this.controls.pause(partition.topic, partition.partition);
  }

  private cancel(partition: PartitionRef): void {
    this.holds.get(partition.key)?.cancel();
    this.holds.delete(partition.key);
  }
}
