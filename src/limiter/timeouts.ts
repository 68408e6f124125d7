import { performance } from 'node:perf_hooks';

interface Pending {
  readonly deadline: number;
  settled: boolean;
  readonly expire: () => void;
}

/** A call being watched (see {@link CallTimeouts.watch}). */
export type Watched = object;

/**
 * Times out a limiter's calls with one timer instead of one `setTimeout`/`clearTimeout` pair per call
 * (which costs about as much as all the rest of the limiter's own client-side work). Every call gets the
 * same timeout, so deadlines come in call order: the calls wait in a queue, settled ones leave from the
 * front at once (replies on one connection arrive in order), and a single timer watches the oldest.
 */
export class CallTimeouts {
  private readonly timeoutMs: number;
  private queue: Pending[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(timeoutMs: number) {
    this.timeoutMs = timeoutMs;
  }

  /** `promise`, or a rejection with `onTimeout()` if it has not settled within the timeout. */
  track<T>(promise: Promise<T>, onTimeout: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const watched = this.watch(() => reject(onTimeout()));
      promise.then(
        (value) => {
          if (this.settle(watched)) resolve(value);
        },
        (error: unknown) => {
          if (this.settle(watched)) reject(error);
        },
      );
    });
  }

  /**
   * Starts watching one call: `expire` runs if {@link settle} was not called for it within the timeout.
   * (What `track` does, for a caller that settles a promise of its own.)
   */
  watch(expire: () => void): Watched {
    const pending: Pending = { deadline: performance.now() + this.timeoutMs, settled: false, expire };
    this.queue.push(pending);
    if (this.timer === undefined) this.arm(this.timeoutMs);
    return pending;
  }

  /** Marks a watched call answered. False when it had already expired: its answer is then ignored. */
  settle(watched: Watched): boolean {
    const pending = watched as Pending;
    if (pending.settled) return false;
    pending.settled = true;
    this.dropSettled();
    return true;
  }

  private arm(delayMs: number): void {
    this.timer = setTimeout(() => this.expire(), Math.max(1, Math.ceil(delayMs)));
    this.timer.unref(); // the limiter alone must not keep a process alive
  }

  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.head < this.queue.length) {
      const pending = this.queue[this.head] as Pending;
      if (!pending.settled) {
        if (pending.deadline > now) break;
        pending.settled = true;
        pending.expire();
      }
      this.head += 1;
    }
    this.dropSettled();
    const oldest = this.queue[this.head];
    if (oldest) this.arm(oldest.deadline - now);
  }

  private dropSettled(): void {
    while (this.head < this.queue.length && (this.queue[this.head] as Pending).settled) this.head += 1;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    } else if (this.head > 1024) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }
}
