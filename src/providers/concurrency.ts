/**
 * At most `limit` tasks running at once; the rest wait in arrival order. One instance per provider, so
 * the bound holds across concurrent `send` calls (several partitions sending at the same time).
 */
export class ConcurrencyLimit {
  private max: number;
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private head = 0;

  constructor(limit: number) {
    this.max = checked(limit);
  }

  get limit(): number {
    return this.max;
  }

  /**
   * A new bound, from now on: a higher one starts waiting tasks at once; under a lower one, running
   * tasks finish and no waiting task starts until fewer than the new bound run.
   */
  resize(limit: number): void {
    this.max = checked(limit);
    while (this.running < this.max && this.head < this.waiting.length) {
      this.running += 1;
      this.next()();
    }
  }

  /** Tasks started and not finished yet. */
  get inFlight(): number {
    return this.running;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running += 1;
    }
    try {
      return await task();
    } finally {
      this.release();
    }
  }

  private release(): void {
    // The slot passes straight to the next waiter (`running` stays the same), unless the bound was
    // lowered below what runs.
    if (this.head < this.waiting.length && this.running <= this.max) this.next()();
    else this.running -= 1;
  }

  /** Takes the first waiter off the queue. */
  private next(): () => void {
    const next = this.waiting[this.head] as () => void;
    this.waiting[this.head] = noop;
    this.head += 1;
    if (this.head > 1024 && this.head * 2 > this.waiting.length) {
      this.waiting.splice(0, this.head);
      this.head = 0;
    }
    return next;
  }
}

function checked(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1)
    throw new RangeError(`concurrency limit must be a positive integer, got ${limit}`);
  return limit;
}

const noop = () => {};

/** Maps every item through `task` under `limit`, keeping the order of the input. */
export function mapBounded<T, R>(
  items: readonly T[],
  limit: ConcurrencyLimit,
  task: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  return Promise.all(items.map((item, index) => limit.run(() => task(item, index))));
}
